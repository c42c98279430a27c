"""Helper for the round-2 cases: ``c2`` wraps ``record.case`` with a few more renames
(and an optional ``L(x)`` helper prepended to both programs)."""
import textwrap

from record import AUTO, auto_tf, case

ST = "strategy.txt"
PS = "parameter_server_strategy.txt"
CS = "central_storage_strategy.txt"
MD = "module_tf_distribute.txt"
SE = "strategy_extended.txt"

EXTRA = [("idist.optimizers.Adam", "tf.keras.optimizers.Adam")]
LH = "def L(x):\n    return [np.asarray(c).tolist() for c in strategy.experimental_local_results(x)]\n"


def c2(id, seed, what, code, tf_code=AUTO, strategy="M2", helper=True, tf_sub=(), **kw):
    code = textwrap.dedent(code).strip("\n") + "\n"
    if tf_code is AUTO:
        t = code
        for a, b in EXTRA:
            t = t.replace(a, b)
        tf_code = auto_tf(t)
        for a, b in tf_sub:
            tf_code = tf_code.replace(a, b)
    else:
        tf_code = textwrap.dedent(tf_code).strip("\n") + "\n"
    if helper and strategy is not None and not kw.get("raw"):
        code, tf_code = LH + code, LH + tf_code
    case(id, seed, what, code, tf_code, strategy=strategy, **kw)

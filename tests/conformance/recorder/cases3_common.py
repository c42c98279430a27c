"""Helper for the round-3 cases: ``c3`` is ``cases2_common.c2`` plus two TF-side renames:
``idist.PerReplica``/``Mirrored``/``MirroredVariable``/``SyncOnReadVariable``/``DistributedValues``
become the classes of ``tensorflow.python.distribute.values`` (TF does not export them publicly),
so a case can record ``isinstance`` booleans instead of class names."""
import re
import textwrap

from cases2_common import CS, MD, PS, SE, ST, c2  # noqa: F401
from record import AUTO, auto_tf

TFV = "from tensorflow.python.distribute import values as _tfv\n"
_CLS = re.compile(r"idist\.(PerReplica|MirroredVariable|Mirrored|SyncOnReadVariable|DistributedValues)\b")


def c3(id, seed, what, code, tf_code=AUTO, tf_sub=(), **kw):
    code = textwrap.dedent(code).strip("\n") + "\n"
    if tf_code is AUTO:
        t = TFV + _CLS.sub(r"_tfv.\1", code)
        t = t.replace("idist.optimizers.Adam", "tf.keras.optimizers.Adam")
        tf_code = auto_tf(t)
        # a caught tf.errors.InvalidArgumentError is recorded as ValueError (as record.EXC_MAP does)
        tf_code = tf_code.replace("type(e).__name__", "_ename(e)")
        if "_ename(e)" in tf_code:
            tf_code = ("def _ename(e):\n    n = type(e).__name__\n"
                       "    return 'ValueError' if n == 'InvalidArgumentError' else n\n") + tf_code
        for a, b in tf_sub:
            tf_code = tf_code.replace(a, b)
    c2(id, seed, what, code, tf_code, **kw)

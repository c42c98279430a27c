"""The notebook's side: clusters, replica groups, the control path and the event log.

``cluster.py`` starts (or adopts) the Dask cluster and pools embedded ones (``embedded.py`` starts
them); ``worker_process.py`` (its logs in ``worker_log.py``) starts and watches an embedded
cluster's worker processes (in sessions of their own, without
``multiprocessing``, gone with the notebook), forked from a ``zygote.py`` that imported them once where
it can (``interdist.Server``, and embedded CPU clusters unless ``interdist.cluster.fork-workers`` is
false); ``reclaim.py`` closes strategies the garbage collector finds unclosed;
``gpus.py`` finds the
machine's GPUs and starts and checks a worker per GPU; ``group.py`` sends programs to a group's
replicas and gathers their replies (``protocol.Reply``); ``replies.py`` turns a step's replies into
one result or one exception; ``fn_pickle.py`` pickles replica functions once while their captures
are unchanged; ``event_log.py`` keeps the events that come back; ``roles.py`` maps TF tasks onto
Dask workers.
"""

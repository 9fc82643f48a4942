"""Parsers for raw validation outputs (pure functions of the text, standard library only).

* :mod:`.nccl`: nccl-tests stdout of every version (and the built-in torch collective
  benchmark, which prints the same table) and nccl-tests ``-J`` JSON -> :class:`~.nccl.NcclRun`.
* :mod:`.fio`: fio JSON (``--output-format=json``/``json+``) and fio's normal text output,
  verify failures -> :class:`~.fio.FioReport`.
* :mod:`.amp`: the AMP training benchmark's JSON -> :class:`~.amp.AmpRun`.
* :mod:`.detect`: sniff which of these a file holds.

Parsers never judge: they report what the output says, including what is missing (``None``).
"""

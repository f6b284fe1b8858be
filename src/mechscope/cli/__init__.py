"""The ``mechscope`` command line: the root app (:mod:`.main`), what every workflow's commands
share (:mod:`.common`, :mod:`.options`, :mod:`.model_options`, :mod:`.executor_options`), the
model commands (:mod:`.model_commands`) and the one-line error policy (:mod:`.errors`).

Kept empty so that importing one of these modules does not build the whole command line.
"""

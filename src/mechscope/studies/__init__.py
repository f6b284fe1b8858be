"""Whole studies on real benchmarks, built on the workflows (one package per study).

- :mod:`mechscope.studies.humaneval`: does a model read the tool response it is given?
  (``mechscope lens study humaneval``);
- :mod:`mechscope.studies.sandbox`: runs generated Python programs in a child process
  (used by the HumanEval study to test completions).
"""

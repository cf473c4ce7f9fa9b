"""What notebooks need besides the library's studies: parameters, results, figures, the runner.

* :mod:`~spec_lib.notebook.params`: the parameters cell and params files;
* :mod:`~spec_lib.notebook.results`: staged outputs published as one set per run;
* :mod:`~spec_lib.notebook.plotting`: the figure saver and the figures notebooks share;
* :mod:`~spec_lib.notebook.run`: ``python -m spec_lib.run``.
"""

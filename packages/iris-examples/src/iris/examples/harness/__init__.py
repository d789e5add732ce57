"""What runs the examples, shared by all of them; not an example to copy.

=====================  ==========================================================================
module                 what it is
=====================  ==========================================================================
``cli``                ``python -m iris.examples NAME ...`` and the ``iris-examples`` script
``registry``           the examples by name (``EXAMPLES``), imported only when one runs
``launch``             starting the ranks (torch's elastic launcher, or in place under torchrun)
``options``            argparse types the examples share (``positive_int``, ``dtype_type``)
``units``              byte sizes: ``parse_size``, ``size_type``, ``format_bytes``
``timing``             the one timer, ``time_launches``; ``host_seconds``; ``max_over_ranks``
``validation``         checking a result against torch, printing the mismatches
``tables``             rich tables, CSV, plots, progress bars
``environment``        what a benchmark ran on (device, MPS, versions), under every table
``trace``              ``--trace FILE``: device tracing around a rank's work
``trace_view``         ``trace-view FILE --png OUT``: a trace file drawn as a timeline
``_internals``         the private torch API the timer reaches into, behind a feature check
=====================  ==========================================================================

Until 0.2.0 these modules sat beside the examples (``iris.examples.timing``, ...); those paths
still import, with a ``DeprecationWarning``, until 0.3.
"""

"""
Performance benchmarks of the provider: ``./dev bench`` (or ``python -m benchmarks.run_all``).

Each ``bench_*`` module measures one figure against a reference measured in the same run and returns
:class:`benchmarks._common.Row` objects; ``run_all`` prints them as one table. Results are never
asserted in tests. See ``docs/benchmarks.md``.
"""

"""Calibration: fitting a perf model's parameters to measurements, with the fit's quality.

A different job from timing a step (``servesim.perf``): readers of measurements
(``measurements``, ``engine_logs``), the bounded least-squares fits (``fitting``), and the
sources -> hardware profile entry point behind ``servesim calibrate`` (``calibrate``).
The profile it writes is read back by ``servesim.perf.profiled``.
"""

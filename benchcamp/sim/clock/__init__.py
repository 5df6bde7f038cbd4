"""The virtual clock: the simulated engine's core (``benchcamp.sim.engine``) driven in-process, with no HTTP.

- ``simulate``: one point (closed loop, open loop or trace replay) over one engine or a whole topology;
- ``fleet``: a topology's engines and router on one virtual clock (prefill/decode hand-offs, instances);
- ``virtual_point``: a sweep point or a capacity probe measured on the virtual clock, summarised as the HTTP
  load generator's points are;
- ``cli``: ``benchcamp engine simulate``.

Above the engine core, beside its HTTP server (``benchcamp.sim.engine.server``, the wall clock).
"""

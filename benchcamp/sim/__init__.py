"""The simulated vLLM: ``sim.engine`` is the engine (scheduler, paged KV and prefix cache, step-time model, front
end, HTTP server), ``sim.clock`` drives it in virtual time (one point, a capacity probe, a whole topology)."""

"""SemiAnalysis' AgentX, as its harness reads and plays it: the trace schema (``schema``), where traces lie on
disk (``files``), their import into a workload (``traces``), each trace's conversation structure (``plan``,
``chains``), the model map (``models``) and the two scenarios with what makes a valid submission
(``scenarios``). The replay rules both clocks follow are ``benchcamp.loadgen.agentx``."""

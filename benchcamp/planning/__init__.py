"""How many agents fit: the capacity search over one deployment, and the planner over candidate layouts."""

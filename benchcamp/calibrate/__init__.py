"""Fitting the simulated engine's profiles to measured real runs (`benchcamp calibrate`)."""

"""The engine: claims, runs, results, leader lease and the serve loop."""

"""The pure planner: resources, the memory model, and the search for chunk rows, fan-in and tiles."""

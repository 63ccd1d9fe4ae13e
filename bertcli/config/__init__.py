"""Layer 1: the recipe, its sections, the families as data, the phase plan, the stage keys."""


def planning_function(processed_state):
    """Attack whenever a living enemy is in range, otherwise move in; dead agents get
    NONE."""
    in_range = processed_state["in_range"].any(axis=1)
    alive = processed_state["ally_alive"] == 1
    task = jnp.where(in_range, ATTACK, MOVE)
    return jnp.where(alive, task, NONE)

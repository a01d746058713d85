def planning_function(processed_state):
    agent_pos = processed_state["agent_pos"]
    food_pos = processed_state["food_pos"]
    alive = processed_state["food_alive"]
    offset = (food_pos[None, :, :] - agent_pos[:, None, :]).astype(jnp.float32)
    dist = jnp.sqrt((offset * offset).sum(-1))
    # each remaining food's distance to its closest agent; the closest food is the target
    closest = dist.min(0) + 1000.0 * (1 - alive)
    target_food = jnp.argmin(closest)
    total_agent_level = processed_state["agent_level"].sum()
    enough = total_agent_level >= processed_state["food_level"][target_food]
    pickup = (dist[:, target_food] <= 1) & enough
    return jnp.where(pickup, PICKUP, target_food)
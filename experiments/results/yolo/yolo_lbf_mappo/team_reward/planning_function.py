
def planning_function(processed_state):
    """Both agents go for the nearest food still on the grid; once both stand next to it
    they pick it up together (each food needs the sum of the agents' levels)."""
    distance = processed_state["distance"]
    alive = processed_state["food_alive"]
    total = distance.sum(0) + 1000 * (1 - alive)
    food = jnp.argmin(total)
    both_adjacent = (distance[:, food] == 1).all()
    task = jnp.where(both_adjacent, PICKUP, food)
    return {"agent_0": task, "agent_1": task}

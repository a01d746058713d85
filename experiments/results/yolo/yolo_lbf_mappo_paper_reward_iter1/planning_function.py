def planning_function(processed_state):
    distance = processed_state["distance"]
    alive = processed_state["food_alive"]
    total = distance.sum(0) + 1000 * (1 - alive)
    food = jnp.argmin(total)
    both_adjacent = (distance[:, food] == 1).all()
    task = jnp.where(both_adjacent, PICKUP, food)
    return {"agent_0": task, "agent_1": task}


def compute_reward(processed_state, llm_tasks, tasks):
    pos = processed_state["agent_pos"]
    food = processed_state["food_pos"]
    alive = processed_state["food_alive"]
    distance = processed_state["distance"] + 1000 * (1 - alive)[None, :]
    any_food = alive.sum() > 0
    # reward for picking up food: LOAD within distance 1 of a remaining food
    pickup = (tasks == 5) & (distance.min(1) <= 1)
    # reward for moving towards the closest remaining food (actions 1-4: N, S, W, E)
    closest = food[jnp.argmin(distance, 1)]
    old = jnp.abs(pos - closest).sum(1)
    step = jnp.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]])[tasks]
    new = jnp.abs(pos + step - closest).sum(1)
    moving = (tasks >= 1) & (tasks <= 4)
    closer = moving & (new < old) & any_food
    # reward for agent proximity (encouraging potential collaboration)
    apart = jnp.abs(pos[0] - pos[1]).sum()
    proximity = jnp.maximum(0.0, (5.0 - apart) / 2.0)
    reward = 10.0 * pickup + 1.0 * closer + proximity
    return {"agent_0": reward[0], "agent_1": reward[1]}
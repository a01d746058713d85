
def planning_function(processed_state):
    """Each agent goes to its own landmark: repeatedly give the closest free
    (agent, landmark) pair to each other."""
    distance = processed_state["distance"]
    n_agents = distance.shape[0]
    n_landmarks = distance.shape[1]
    task = jnp.full((n_agents,), NO_OP)
    free_agent = jnp.ones((n_agents,))
    free_landmark = jnp.ones((n_landmarks,))
    for step in range(NUM_AGENTS):
        cost = distance + 1000.0 * (1 - free_agent[:, None]) + 1000.0 * (1 - free_landmark[None, :])
        best = jnp.argmin(cost)
        agent = best // n_landmarks
        landmark = best % n_landmarks
        open_pair = cost.min() < 1000.0
        task = jnp.where(open_pair, task.at[agent].set(landmark), task)
        free_agent = jnp.where(open_pair, free_agent.at[agent].set(0.0), free_agent)
        free_landmark = jnp.where(open_pair, free_landmark.at[landmark].set(0.0), free_landmark)
    return task

"""A custom reward function as users write them for verl: compute_score(data_source, solution_str, ...)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0

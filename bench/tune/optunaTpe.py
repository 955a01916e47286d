"""Optuna's default TPESampler on Branin or Hartmann6: the anchor search.ts prints beside our TPE.

    /usr/bin/python3 bench/tune/optunaTpe.py FUNCTION EVALUATIONS SEEDS [FIRST_SEED=0]

Prints one JSON line per seed (FIRST_SEED, FIRST_SEED + 1, ...): the best value after each evaluation. The functions and bounds
are the ones search.ts uses (Branin on [-5, 10] x [0, 15], Hartmann6 on [0, 1]^6).
"""
import json
import math
import sys

import optuna

H_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
H_P = [[v * 1e-4 for v in row] for row in [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                                            [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]]
H_ALPHA = [1, 1.2, 3, 3.2]


def branin(trial):
    x1 = trial.suggest_float("x1", -5, 10)
    x2 = trial.suggest_float("x2", 0, 15)
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann6(trial):
    x = [trial.suggest_float(f"x{i}", 0, 1) for i in range(1, 7)]
    return -sum(H_ALPHA[i] * math.exp(-sum(H_A[i][j] * (x[j] - H_P[i][j]) ** 2 for j in range(6))) for i in range(4))


def main():
    name, evaluations, seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    objective = {"branin": branin, "hartmann6": hartmann6}[name]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(first, first + seeds):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        study.optimize(objective, n_trials=evaluations)
        best, curve = math.inf, []
        for t in study.trials:
            best = min(best, t.value)
            curve.append(best)
        print(json.dumps(curve), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What deploy/bench/cost.sh reads from its own earlier steps to size the next ones, from the
files in its work folder. Usage:

    cost_steps.py orders-per-message WORK ROUNDS
        the median over the sales of the orders a transactional message carried (at least
        1), which the broker's floor then sends in each message;
    cost_steps.py closed-rate WORK ROUNDS
        the median closed-loop purchase rate, which the latency curve takes its shares of.
"""

import json
import statistics
import sys

from figures import metric_growth


def orders_per_message(work, rounds):
    means = []
    for r in range(1, rounds + 1):
        before, after = f"{work}/sale-{r}.metrics-before", f"{work}/sale-{r}.metrics-after"
        messages = metric_growth(before, after, "seckill_orders_per_message_count")
        if messages:
            means.append(metric_growth(before, after, "seckill_orders_per_message_sum") / messages)
    return max(1, round(statistics.median(means))) if means else 1


def closed_rate(work, rounds):
    return round(statistics.median(
        json.load(open(f"{work}/closed-{r}.json"))["purchases_per_sec"] for r in range(1, rounds + 1)))


if __name__ == "__main__":
    step, work, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print({"orders-per-message": orders_per_message, "closed-rate": closed_rate}[step](work, rounds))

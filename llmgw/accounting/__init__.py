"""Accounting: what a request costs, who may send one now, and the record of it.

Everything here is counted in memory on the hot path and never waits on the
store: prices are arithmetic, rate limits are sliding-minute counters,
budgets are counters restored from the store at start and raised to it
every 30 s, and usage rows go to the store in batches from a background
task. The router calls, per request:

    refusal = limiter.check(principal) or budgets.check(principal, now)
    limiter.admit(principal)
    ... the answer ...
    limiter.add_tokens(principal, tokens)
    budgets.charge(principal, cost_micros, now)

The limiter keeps its own monotonic clock (a `now` given to it is on that
clock); budgets, counted by the calendar, take Unix time.
    writer.submit(Usage(...))

Off the hot path, UsageReports reads usage back for people: days by model,
key, project or person from the store's UTC day sums, spend against
budgets, and exports of the raw rows.
"""

from llmgw.accounting.budgets import Budgets, period_end, period_start
from llmgw.accounting.lending import Borrower, Lender
from llmgw.accounting.prices import batch_cost, cost
from llmgw.accounting.ratelimit import RESOLUTION, RateLimiter
from llmgw.accounting.refusal import Refusal, level_name
from llmgw.accounting.reports import EXPORT_PAGE, FORMATS, NOTHING_USED, Series, UsageReports, nothing_shown
from llmgw.accounting.usage import UsageWriter

__all__ = ["Budgets", "RateLimiter", "Refusal", "Series", "UsageReports", "UsageWriter", "batch_cost", "cost",
           "level_name", "period_end", "period_start",
           "Borrower", "Lender", "RESOLUTION", "EXPORT_PAGE", "FORMATS", "NOTHING_USED", "nothing_shown"]

"""One module per concern. Each holds an operations mixin whose methods run in a unit of work.

A method is written once: it opens ``self.unit_of_work()``. On a
:class:`~hubstore.uow.UnitOfWork` that joins the current transaction (as a savepoint);
on the :class:`~hubstore.store.HubStore` facade it opens a unit of work of its own. So
the facade and the unit of work share every method, type-checked, with no wrappers.
:class:`HubOperations` lists the mixins once; both classes inherit it.
"""

from hubstore.services.agents import AgentOps
from hubstore.services.assign_hub import AssignHubOps
from hubstore.services.assigns import AssignOps
from hubstore.services.dead_letters import DeadLetterOps
from hubstore.services.human_requests import HumanRequestOps
from hubstore.services.messages import MessageOps
from hubstore.services.pipelines import PipelineOps
from hubstore.services.reflexion import ReflexionOps
from hubstore.services.retention import RetentionOps
from hubstore.services.stats import StatsOps


class HubOperations(
    AgentOps, MessageOps, HumanRequestOps, DeadLetterOps, AssignOps, AssignHubOps,
    ReflexionOps, PipelineOps, StatsOps, RetentionOps,
):
    """Every store method: the one list of operation mixins (facade and unit of work)."""


__all__ = ["HubOperations"]

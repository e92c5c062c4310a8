"""One module per concern. Each holds an operations mixin whose methods run in a unit of work.

A method is written once: it opens ``self.unit_of_work()``. On a
:class:`~hubstore.uow.UnitOfWork` that joins the current transaction; on the
:class:`~hubstore.store.HubStore` facade it opens a unit of work of its own. So the
facade and the unit of work share every method, type-checked, with no wrappers.
"""

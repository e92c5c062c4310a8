"""The store's business rules, one module per concern.

Each store method is a plain function whose first argument is a
:class:`~hubstore.transaction.Scope`: it validates its arguments, then opens the unit of
work it runs in (``scope.unit_of_work()``, ``scope.one_statement()`` or
``scope.one_read()``) and runs its statements there. A service that needs another's work
calls that module's function with its unit of work (``messages.record_message(uow, ...)``),
never the facade. :mod:`hubstore.operations` lists them as methods of the store and of
the unit of work.
"""

"""The store's business rules, one module per concern (the assign jobs' in a package of
their own, :mod:`hubstore.services.assigns`).

Each store method is a plain function whose first argument is a
:class:`~hubstore.transaction.Scope`: it validates its arguments, then opens the
transaction it runs in (``scope.transaction()``, ``scope.one_statement()`` or
``scope.one_read()``) and runs its statements there, on the
:class:`~hubstore.transaction.Transaction` that yields. A service that needs another's
work calls that module's function with its transaction
(``messages.record_message(tx, ...)``), never the facade. :mod:`hubstore.operations`
lists them as methods of the store and of the unit of work.
"""

"""The console's pages, one module per page: each exports ``routes``."""

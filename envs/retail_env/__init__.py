"""The bundled retail customer-service env: an SQLite orders database, tools, a customer."""

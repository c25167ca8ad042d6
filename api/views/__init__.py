"""The API views, one module per resource; :mod:`api.urls` routes them."""

"""The service's routes, one router per area: :mod:`.page` (the page, API docs, health, metrics),
:mod:`.search` (search and composed retrieval), :mod:`.generate` (captions and images with
examples), :mod:`.images` (pool images and thumbnails)."""

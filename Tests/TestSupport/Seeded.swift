// The seeded generator the tests share is the product's own (check-host replays with it too).
@_exported import Seeded

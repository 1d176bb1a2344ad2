/// The version of basket-sync, printed by `basket-sync --version`.
public let basketSyncVersion = "0.1.0"

/// When this version was made: the date of its manual page.
public let basketSyncDate = "2026-12-01"

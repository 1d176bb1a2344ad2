/// The version of basket-sync, printed by `basket-sync --version`.
public let basketSyncVersion = "0.1.0"

/// The library's settings, read from `basket-sync.json` by the agent.
public struct SyncConfiguration: Hashable, Sendable {
    /// How long a batch waits for the echo of a host that does not write `syncedThrough`.
    public var pendingTimeout: Duration
    /// How many rolled-back batches are remembered to report a late echo.
    public var rolledBackMemory: Int
    /// How many lines the rolled-back batches remembered hold at most together (the newest is
    /// kept whatever its size): the state, held in memory and saved at every step, stays bounded
    /// by lines, not only by batches.
    public var rolledBackLines: Int

    /// The SDK's defaults: a 10 s pending window.
    public init(pendingTimeout: Duration = .seconds(10), rolledBackMemory: Int = 32, rolledBackLines: Int = 100_000) {
        self.pendingTimeout = pendingTimeout
        self.rolledBackMemory = rolledBackMemory
        self.rolledBackLines = rolledBackLines
    }
}


extension Duration {
    /// The duration in seconds, for `Date` arithmetic.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}

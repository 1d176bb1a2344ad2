/// The library's settings, read from `basket-sync.json` by the agent.
public struct SyncConfiguration: Hashable, Sendable {
    /// How long a batch waits for the echo of a host that does not write `syncedThrough`.
    public var pendingTimeout: Duration
    /// How many rolled-back batches are remembered to report a late echo.
    public var rolledBackMemory: Int

    /// The SDK's defaults: a 10 s pending window.
    public init(pendingTimeout: Duration = .seconds(10), rolledBackMemory: Int = 32) {
        self.pendingTimeout = pendingTimeout
        self.rolledBackMemory = rolledBackMemory
    }
}


extension Duration {
    /// The duration in seconds, for `Date` arithmetic.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}

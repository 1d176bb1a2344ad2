import BasketSync
import BasketSyncWire

extension Commands {
    /// What `wait` found.
    public struct WaitResult {
        /// The seq waited after.
        public var after: UInt64
        /// The outbox records after it, each its JSON line as the outbox holds it (with `\n`).
        public var lines: [[UInt8]]
    }

    /// `wait`: blocks until the outbox holds a record after `after` (default: where the host is,
    /// from the cart's `syncedThrough` and what the database knows), and returns those records.
    /// It sleeps on inotify (the outbox file changing, another process's commit), never polls, and
    /// writes nothing: it works beside the agent, beside `sync` from cron, and on a read-only file
    /// system. Throws `.busy` (75) when `timeout` seconds pass first.
    public static func wait(directory: String, after: UInt64?, timeout: Double?) throws(AgentError) -> WaitResult {
        let store = try Store(directory: directory, create: false, readOnly: true)
        let configuration = try AgentConfiguration.load(directory: directory)
        // The watches first: a record committed after this is seen by the reads below, or wakes us.
        let inotify: Inotify
        do {
            inotify = try Inotify(path: directory)
            try inotify.watch(directory, [.modify, .closeWrite, .movedTo, .create, .onlyDirectory])
            try inotify.watch(store.stateDirectory, [.closeWrite, .onlyDirectory])
        } catch {
            throw .system(error)
        }
        let start: UInt64
        if let after {
            start = after
        } else {
            let state = try store.withTransaction { () throws(AgentError) in try store.loadState() }
            start = hostProgress(state: state, claim: cartClaim(directory: directory, configuration: configuration) ?? 0)
        }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        var look = true
        while true {
            if look {
                let lines = try store.withTransaction { () throws(AgentError) in try store.lines(.outbox, after: start) }
                if !lines.isEmpty { return WaitResult(after: start, lines: lines.map(\.line)) }
            }
            var milliseconds: Int32 = -1
            if let deadline {
                let left = deadline.timeIntervalSinceNow
                if left <= 0 {
                    throw .busy("\(directory)/\(Projection.outbox.fileName): no record after seq \(start) within \(timeout!) s; run wait again to go on waiting")
                }
                milliseconds = Int32(min(left * 1000, Double(Int32.max)).rounded(.up))
            }
            // Only the outbox file changing, or a commit signalled, is worth a look at the
            // database; SQLite closing its own files (a reader such as status) is not.
            look = false
            do {
                if try Posix.waitReadable([inotify.fd], timeout: milliseconds)[0] {
                    look = try inotify.events().contains { event in
                        event.watch < 0 || event.mask.contains(.overflow)
                            || event.name == Projection.outbox.fileName || event.name == Store.commitSignalName
                    }
                }
            } catch {
                throw .system(error)
            }
        }
    }

    /// The `syncedThrough` of the cart in place, read without taking it; nil when there is no
    /// cart, it does not parse, or it says nothing.
    static func cartClaim(directory: String, configuration: AgentConfiguration) -> UInt64? {
        guard case let .new(bytes, _)? = try? CartReader().read("\(directory)/\(configuration.cart)", configuration: configuration),
              let cart = try? CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits) else { return nil }
        return cart.syncedThrough
    }
}

import BasketSyncWire

/// How `watch` sees a directory's changes — inotify or polling — and why (docs/spec.md §10).
public struct WatchChoice: Equatable, Sendable {
    /// Whether the directory is polled.
    public var polls: Bool
    /// The poll interval, in milliseconds.
    public var intervalMs: Int
    /// Why, for the log and `status`: the setting that forced it, or the file system.
    public var reason: String


    /// The agent that runs, if one does: the process holding the agent's lock (only an agent
    /// takes it), whatever it is doing — its start pass too, before its note is written, and
    /// while the database is busy. How it watches is its note's, when the note is that
    /// process's (a note of an agent gone is not the truth of now).
    static func runningAgent(_ store: Store) -> RunningAgent? {
        guard let pid = Posix.lockHolders("\(store.database.markerDirectory)/\(Layout.agentLock)").first(where: { $0 > 0 }) else { return nil }
        // A read transaction: the agent's own transaction (its start pass) does not hold it up.
        let note = (try? store.database.withReadTransaction { () throws(AgentError) in try store.note(.watch) }) ?? nil
        let parts = note?.split(separator: "\t", maxSplits: 1) ?? []
        guard parts.count == 2, Int32(parts[0]) == pid else { return RunningAgent(pid: pid, description: "starting (its first pass over what waits)") }
        return RunningAgent(pid: pid, description: String(parts[1]))
    }

    /// The agent that runs, and how it watches.
    struct RunningAgent: Equatable {
        var pid: Int32
        /// As it said at its start: "polling every 1000 ms (…)", "inotify (ext4)".
        var description: String
        /// For people.
        var text: String { "\(description) (the agent, pid \(pid))" }

        /// `status --json`'s `"agent"`: `{pid, description}`, or null when no agent runs.
        static func write(_ agent: RunningAgent?, into writer: inout JSONWriter) {
            guard let agent else { return writer.raw("null") }
            writer.object { object in
                object.member("pid", agent.pid)
                object.member("description", agent.description)
            }
        }
    }

    /// What a person reads: "inotify (ext4)", "polling every 1000 ms (nfs: …)".
    public var description: String {
        polls ? "polling every \(intervalMs) ms (\(reason))" : "inotify (\(reason))"
    }

    /// `watch --poll[=MS]`, or `BASKET_SYNC_WATCH_MODE` (`auto`, `inotify`, `poll`, `poll=MS`):
    /// a mode that wins over the configuration's, nil when neither says one.
    public struct Override: Equatable, Sendable {
        /// The mode forced.
        public var mode: AgentConfiguration.Watching.Mode
        /// The interval forced, if given.
        public var intervalMs: Int?
        /// Where it comes from, for the log.
        public var source: String

        /// An override.
        public init(mode: AgentConfiguration.Watching.Mode, intervalMs: Int?, source: String) {
            self.mode = mode
            self.intervalMs = intervalMs
            self.source = source
        }

        /// Parses `poll`, `poll=MS`, `inotify` or `auto`; nil when the text is none of them.
        public static func parse(_ text: String, source: String) -> Override? {
            let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let mode = AgentConfiguration.Watching.Mode(rawValue: String(parts[0])) else { return nil }
            guard parts.count == 2 else { return Override(mode: mode, intervalMs: nil, source: source) }
            guard mode == .poll, parts[1].allSatisfy({ ("0"..."9").contains($0) }), let interval = Int(parts[1]), AgentConfiguration.Watching.intervals.contains(interval) else { return nil }
            return Override(mode: mode, intervalMs: interval, source: source)
        }

        /// `BASKET_SYNC_WATCH_MODE`, if set (a value that is not a mode is an error).
        static func fromEnvironment() throws(AgentError) -> Override? {
            guard let text = Posix.environment("BASKET_SYNC_WATCH_MODE"), !text.isEmpty else { return nil }
            guard let override = parse(text, source: "BASKET_SYNC_WATCH_MODE") else {
                throw .notReady("BASKET_SYNC_WATCH_MODE is auto, inotify, poll or poll=MS (MS from \(AgentConfiguration.Watching.intervals.lowerBound) to \(AgentConfiguration.Watching.intervals.upperBound)), not \(JSONWriter.quoted(text))")
            }
            return override
        }
    }

    /// The choice for `directory`, whose cart is at `cart` (relative), under `settings` and an
    /// override (the command line's, else the environment's).
    static func decide(directory: String, cart: String, settings: AgentConfiguration.Watching, override: Override?) throws(AgentError) -> WatchChoice {
        var forced = override
        if forced == nil { forced = try Override.fromEnvironment() }
        let mode = forced?.mode ?? settings.mode
        let interval = forced?.intervalMs ?? settings.pollIntervalMs
        let why = forced.map { "\($0.source)" } ?? "\"watch\": {\"mode\": \"\(mode.rawValue)\"}"
        switch mode {
        case .poll: return WatchChoice(polls: true, intervalMs: interval, reason: why)
        case .inotify: return WatchChoice(polls: false, intervalMs: interval, reason: why)
        case .auto: break
        }
        // The sync directory, and the cart's own directory when it is elsewhere (a mount inside).
        var places = [directory]
        let components = cart.split(separator: "/")
        if components.count > 1 { places.append("\(directory)/" + components.dropLast().joined(separator: "/")) }
        var names: [String] = []
        for place in places {
            guard let kind = FileSystemKind.of(place) else { continue }
            if kind.isBlindToInotify {
                return WatchChoice(polls: true, intervalMs: interval, reason: "\(place) is on \(kind.name): inotify cannot see writes made by other machines or by the file system's daemon")
            }
            if !names.contains(kind.name) { names.append(kind.name) }
        }
        return WatchChoice(polls: false, intervalMs: interval, reason: names.isEmpty ? "auto" : names.joined(separator: ", "))
    }
}

import BasketSync
import BasketSyncWire

/// Metrics for Prometheus, the Unix way (docs/spec.md §12): node_exporter's textfile format, made
/// from what `status` reads — counters summed over the carts, gauges of now. `basket-sync
/// metrics` prints them; the agent writes them to `"metrics"` (replaced whole, atomically).
public enum Metrics {
    /// One metric family: its name, type, help, and samples (labels, value).
    struct Family {
        var name: String
        var type: String
        var help: String
        var samples: [(labels: [(String, String)], value: Double)]
    }

    /// The exposition of `report`.
    public static func text(_ report: StatusReport) -> String {
        let directory = report.only?.directory ?? report.root
        let carts = report.only.map { [$0] } ?? report.carts.map(\.report)
        // Counters over every cart the database holds (one whose folder is out of reach too).
        let counted = report.counted
        func sum(_ value: (SyncCounters) -> UInt64) -> Double { Double(counted.reduce(UInt64(0)) { $0 + value($1.counters) }) }
        func records(_ projection: Projection) -> Double { Double(counted.reduce(UInt64(0)) { $0 + ($1.counts[projection] ?? 0) }) }
        func counter(_ name: String, _ help: String, _ value: (SyncCounters) -> UInt64) -> Family {
            Family(name: "basket_sync_\(name)_total", type: "counter", help: help, samples: [([], sum(value))])
        }
        let health = report.health
        let errors = carts.reduce(0) { total, cart in
            let current = cart.currentErrors
            return total + [current.cart, current.inbox, current.database, current.pass].compactMap { $0 }.count
        } + report.unreadable.count + (report.configurationProblem == nil ? 0 : 1)
        var families: [Family] = [
            Family(name: "basket_sync_records_total", type: "counter", help: "Records written, per JSON Lines file (their last seq, summed over the carts).",
                   samples: Projection.allCases.map { projection in ([("file", projection.fileName)], records(projection)) }),
            counter("update_baskets", "updateBasket batches pushed to the host.") { $0.updateBaskets },
            counter("notifications", "Notifications of the host's cart sent to Mealz.") { $0.notifications },
            counter("settled", "Batches settled (acknowledged or echoed by the host).") { $0.settled },
            counter("rolled_back", "Batches rolled back: not echoed within the pending window.") { $0.rolledBack },
            counter("late_echoes", "Batches echoed after their window.") { $0.lateEchoes },
            counter("ignored", "Mealz deltas ignored: no synchronizer registered.") { $0.ignored },
            Family(name: "basket_sync_payments_total", type: "counter", help: "Payments recorded, by status.",
                   samples: [([("status", "recorded")], sum { $0.paymentsRecorded }), ([("status", "skipped")], sum { $0.paymentsSkipped })]),
            counter("duplicate_payments", "Payment retries of an order already recorded.") { $0.duplicatePayments },
            Family(name: "basket_sync_acknowledgement_anomalies_total", type: "counter", help: "A cart's syncedThrough that acknowledged nothing or went back, by kind.",
                   samples: [([("kind", "beyond_outbox")], sum { $0.acknowledgementsBeyondOutbox }),
                             ([("kind", "went_back")], sum { $0.acknowledgementsWentBack }),
                             ([("kind", "late")], sum { $0.lateAcknowledgements })]),
            Family(name: "basket_sync_bad_events", type: "gauge", help: "Inbox events set aside in inbox/bad/.", samples: [([], Double(carts.reduce(0) { $0 + $1.inboxBad }))]),
            Family(name: "basket_sync_errors", type: "gauge", help: "Errors that hold now (cart, inbox, database, pass; a cart that cannot be read; basket-sync.json refused).", samples: [([], Double(errors))]),
            Family(name: "basket_sync_pending_batches", type: "gauge", help: "Batches pending: sent to the host, not settled.", samples: [([], Double(carts.reduce(0) { $0 + $1.state.pending.count }))]),
            Family(name: "basket_sync_waiting_events", type: "gauge", help: "Events waiting in inbox/new/.", samples: [([], Double(carts.reduce(0) { $0 + $1.inboxWaiting }))]),
            Family(name: "basket_sync_oldest_waiting_event_age_seconds", type: "gauge", help: "How long the oldest event waiting in inbox/new/ has waited (0: none waits).",
                   samples: [([], carts.compactMap(\.oldestWaiting).max() ?? 0)]),
            Family(name: "basket_sync_agent_up", type: "gauge", help: "1 when an agent runs and gave a sign of life within two heartbeats, else 0.",
                   samples: [([], health.state == .running ? 1 : 0)]),
            Family(name: "basket_sync_agent_state", type: "gauge", help: "The agent's state: 1 for the one it is in.",
                   samples: [AgentHealth.State.running, .stopped, .stuck, .none].map { ([("state", $0.rawValue)], health.state == $0 ? 1 : 0) }),
        ]
        if let at = health.lastWholePass.flatMap(Timestamp.date) {
            families.append(Family(name: "basket_sync_last_whole_pass_timestamp_seconds", type: "gauge", help: "When the agent's last pass with no cart failing went through (Unix time).",
                                   samples: [([], at.timeIntervalSince1970)]))
        }
        if report.only == nil {
            families.append(Family(name: "basket_sync_carts", type: "gauge", help: "Carts of the tree, by state (a cart may be in several).",
                                   samples: [([("state", "all")], Double(report.cartCount)),
                                             ([("state", "with_errors")], Double(carts.filter { $0.currentError != nil }.count + report.unreadable.count)),
                                             ([("state", "waiting")], Double(carts.filter { $0.inboxWaiting > 0 }.count)),
                                             ([("state", "pending")], Double(carts.filter { !$0.state.pending.isEmpty }.count)),
                                             ([("state", "not_adopted")], Double(report.notAdopted.count))]))
        }
        var lines: [String] = []
        for family in families {
            lines.append("# HELP \(family.name) \(family.help)")
            lines.append("# TYPE \(family.name) \(family.type)")
            for sample in family.samples {
                let labels = ([("directory", directory)] + sample.labels).map { "\($0.0)=\"\(escaped($0.1))\"" }.joined(separator: ",")
                lines.append("\(family.name){\(labels)} \(number(sample.value))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A label value as the format writes it: backslash, double quote and newline escaped.
    static func escaped(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func number(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    /// Writes the metrics of `directory` to `path` (relative to `directory`, or absolute): a temp
    /// file beside it renamed over it, so that the collector never reads half a file. Returns
    /// the text written.
    @discardableResult
    public static func write(directory: String, to path: String, configuration: AgentConfiguration) throws(AgentError) -> String {
        let text = text(try StatusReport(directory: directory))
        try write(text, directory: directory, to: path, configuration: configuration)
        return text
    }

    /// Writes `text` as the metrics of `directory` at `path`. A path in the directory
    /// (relative, or absolute under it as named) is reached through folders opened one by one
    /// without following a link, as every file basket-sync writes there: a folder swapped for
    /// a link by another account is refused, never written through. An absolute path elsewhere
    /// is the operator's, its folder followed as given — and judged again, as opened now, by the
    /// rule its setting was judged by: one that leads into the directory (a folder swapped
    /// since for a link there) is written as a path in it, never as one of basket-sync's own
    /// files or the cart (in `inbox/new/` it would be delivered as an event).
    public static func write(_ text: String, directory: String, to path: String, configuration: AgentConfiguration) throws(AgentError) {
        let bytes = Array(text.utf8)
        func write(_ target: String) throws(AgentError) {
            do { _ = try Posix.writeFileAtomically(target, bytes, mode: 0o644) } catch { throw .system(error) }
        }
        func writeInside(_ relative: String) throws(AgentError) {
            let (reached, folder) = try CartFolder.reach(directory)
            defer { withExtendedLifetime(folder) {} }
            try Posix.withPinnedFolders(base: reached, relative: relative) { (target) throws(AgentError) in try write(target) }
        }
        guard path.hasPrefix("/") else { return try writeInside(path) }
        if path.hasPrefix(directory + "/") { return try writeInside(String(path.dropFirst(directory.count + 1))) }
        let folderPath = Posix.dirname(of: path), name = Posix.basename(of: path)
        // A folder that cannot be opened: the write says why.
        guard let (fd, _) = Posix.openFolderPath(folderPath) else { return try write(path) }
        defer { Posix.close(fd) }
        let pinned = "/proc/self/fd/\(fd)"
        if let components = AgentConfiguration.place(of: directory).inside((Posix.linkTarget(pinned) ?? folderPath) + "/" + name) {
            guard !components.isEmpty, !AgentConfiguration.isOwnOrCart(components, cart: configuration.cart, tree: configuration.isTree) else {
                throw .refused("\(path): its folder \(folderPath) now leads into \(directory), to \(components.joined(separator: "/")) — the cart or one of basket-sync's own files or folders (a folder swapped for a link?); not written. Put the folder back, or set \"metrics\" to a file of its own")
            }
            return try writeInside(components.joined(separator: "/"))
        }
        do { try write("\(pinned)/\(name)") } catch { throw error.replacingPathPrefix(pinned, with: folderPath) }
    }

    /// `text` (an exposition this type made) as the agent leaves it when it stops: no agent up,
    /// its state none; every other sample as it was. Made without reading the carts again, so
    /// that it fits in the second a stop is given, whatever the size of the tree.
    public static func stopped(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            guard line.hasPrefix("basket_sync_agent_up{") || line.hasPrefix("basket_sync_agent_state{"), let space = line.lastIndex(of: " ") else { return String(line) }
            let up = line.hasPrefix("basket_sync_agent_state{") && line[..<space].hasSuffix("state=\"\(AgentHealth.State.none.rawValue)\"}")
            return "\(line[..<space]) \(up ? 1 : 0)"
        }.joined(separator: "\n")
    }
}

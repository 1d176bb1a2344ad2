import BasketSync
import BasketSyncWire
import Glibc

/// The running agent's health, as `status` shows it (docs/spec.md §12): whether an agent holds
/// the directory, whether it is alive and making progress — its heartbeat note, written at most
/// once a minute while idle and after passes — and when its last whole pass went through.
struct AgentHealth: Equatable {
    /// What the agent is doing, as far as this machine can tell.
    enum State: String {
        /// No agent holds the directory (or tree).
        case none
        /// It runs and said it is alive within two heartbeats.
        case running
        /// Its process is stopped (SIGSTOP, a debugger): it serves nothing until continued.
        case stopped
        /// It holds the directory but has not said it is alive for more than two heartbeats.
        case stuck
    }

    var state: State
    var agent: WatchChoice.RunningAgent?
    /// The heartbeat note's time, and how many seconds ago it was.
    var heartbeatAt: String?
    var heartbeatAge: Double?
    /// The agent's heartbeat interval, in seconds, as its note says.
    var interval: Double?
    /// When the agent's last pass with no cart failing went through.
    var lastWholePass: String?

    /// Reads the health of the agent serving `root` (a sync directory's rows, or a tree's root rows).
    static func read(_ root: Store, now: Date = Date()) -> AgentHealth {
        let agent = WatchChoice.runningAgent(root)
        let note = ((try? root.database.withReadTransaction { () throws(AgentError) in try root.note(.heartbeat) }) ?? nil)?
            .split(separator: "\t", omittingEmptySubsequences: false).map(String.init) ?? []
        var health = AgentHealth(state: agent == nil ? .none : .running, agent: agent)
        if note.count >= 4, let pid = Int32(note[1]), pid == agent?.pid {
            health.heartbeatAt = note[0]
            // On the boot clock when the note was written in this boot (a step of the wall clock
            // neither ages a live agent nor hides a stuck one); on the wall clock otherwise.
            if note.count >= 6, note[5] == Posix.bootId, let beat = Double(note[4]) {
                health.heartbeatAge = max(0, Posix.bootSeconds() - beat)
            } else {
                health.heartbeatAge = Timestamp.date(note[0]).map { max(0, now.timeIntervalSince($0)) }
            }
            health.lastWholePass = note[2].isEmpty ? nil : note[2]
            health.interval = Double(note[3])
        }
        guard let agent else { return health }
        if processState(agent.pid).map({ $0 == "T" || $0 == "t" }) == true {
            health.state = .stopped
        } else if let age = health.heartbeatAge, let interval = health.interval, age > 2 * interval + min(5, interval) {
            health.state = .stuck
        }
        return health
    }

    /// The state letter of process `pid` in /proc (R, S, D, T, t, Z…), nil when it cannot be read.
    static func processState(_ pid: Int32) -> Character? {
        guard let bytes = try? Posix.readFile("/proc/\(pid)/stat", limit: 4096, follow: true) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].first { $0 != " " }
    }

    /// For people: one line.
    var text: String {
        let life = heartbeatAge.map { "last sign of life \(Int($0.rounded())) s ago\(interval.map { " (heartbeat every \(AgentConfiguration.number($0)) s)" } ?? "")" } ?? "no heartbeat yet"
        let pass = lastWholePass.map { ", last whole pass at \($0)" } ?? ""
        switch state {
        case .none: return "agent: none runs"
        case .running: return "agent: running, pid \(agent!.pid), \(life)\(pass)"
        case .stopped: return "agent: STOPPED (pid \(agent!.pid) is stopped, by SIGSTOP or a debugger): it serves nothing until continued (kill -CONT \(agent!.pid)); \(life)"
        case .stuck: return "agent: STUCK? pid \(agent!.pid) holds the directory but gave no sign of life for over two heartbeats: \(life)\(pass)"
        }
    }

    /// `status --json`'s `"health"` agent part.
    func write(into object: inout JSONObjectWriter) {
        object.member("agentState", state.rawValue)
        object.member("agentPid", agent.map { Int($0.pid) })
        object.member("heartbeatAt", heartbeatAt)
        object.member("heartbeatAgeSeconds") { $0.raw(text: heartbeatAge.map { AgentConfiguration.number(($0 * 10).rounded() / 10) } ?? "null") }
        object.member("heartbeatSeconds") { $0.raw(text: interval.map { AgentConfiguration.number($0) } ?? "null") }
        object.member("lastWholePass", lastWholePass)
    }
}

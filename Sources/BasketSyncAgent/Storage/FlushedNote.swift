/// What the agent's flushes made durable, as one note on the root's row instead of a note for
/// each file: for each file system (device) and boot, the boot clock when its last `syncfs`
/// that went through began. Every line appended on that file system before that instant is on
/// disk; a file's note made after its append (``AppendCursor/at``) at or before it is durable
/// through its last seq, whatever its own `durable` says.
///
/// One row written a flush, where a note for each file flushed cost a row each: a tree's flush of
/// a thousand carts held the agent's thread for tens of milliseconds.
enum FlushedNote {
    /// The most lines kept (file systems × boots): the oldest go first. A note older than
    /// what is kept is judged by its own `durable` (its file's end is looked at after a restart
    /// of the machine, which is safe).
    static let kept = 16

    /// The note's lines: device, boot, nanoseconds.
    static func entries(_ text: String?) -> [(device: UInt64, boot: String, at: UInt64)] {
        guard let text else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 3, let device = UInt64(fields[0]), let at = UInt64(fields[2]) else { return nil }
            return (device, String(fields[1]), at)
        }
    }

    /// Whether a flush of `device` in `boot` began at or after `at`.
    static func covers(_ text: String?, device: UInt64, boot: String, at: UInt64) -> Bool {
        entries(text).contains { $0.device == device && $0.boot == boot && $0.at >= at }
    }

    /// The note with `device`'s flush in `boot`, begun at `at`, put first.
    static func adding(_ text: String?, device: UInt64, boot: String, at: UInt64) -> String {
        var entries = entries(text).filter { !($0.device == device && $0.boot == boot) || $0.at > at }
        if !entries.contains(where: { $0.device == device && $0.boot == boot }) { entries.insert((device, boot, at), at: 0) }
        return entries.prefix(kept).map { "\($0.device) \($0.boot) \($0.at)" }.joined(separator: "\n")
    }
}

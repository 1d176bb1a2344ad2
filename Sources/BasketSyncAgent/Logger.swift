import BasketSync
import BasketSyncWire
import Synchronization

/// Writes the log on stderr: a readable sentence per line, or one JSON object per line.
public final class Logger: Sendable {
    /// How serious a line is.
    public enum Level: String, Sendable {
        case info
        case warning
        case error
    }

    private let currentFormat: Mutex<LogFormat>
    private let fd: Int32

    /// A logger writing to `fd` (stderr by default).
    public init(format: LogFormat = .human, fd: Int32 = 2) {
        currentFormat = Mutex(format)
        self.fd = fd
    }

    /// The format of the lines; changed on SIGHUP reload.
    public var format: LogFormat {
        get { currentFormat.withLock { $0 } }
        set { currentFormat.withLock { $0 = newValue } }
    }

    private let quiet = Mutex(false)

    /// Whether info lines are left out (`watch --quiet`): warnings and errors only.
    public var isQuiet: Bool {
        get { quiet.withLock { $0 } }
        set { quiet.withLock { $0 = newValue } }
    }

    /// Writes one line, whole (a log that cannot be written is not worth failing for). `record`
    /// is the JSON line of the record the message is about: the JSON format carries it whole.
    public func log(_ level: Level, _ message: String, record: [UInt8]? = nil, evenWhenQuiet: Bool = false) {
        if level == .info, isQuiet, !evenWhenQuiet { return }
        let line: [UInt8]
        switch format {
        case .human:
            line = Array("basket-sync: \(level == .info ? "" : "\(level.rawValue): ")\(JSONWriter.printable(message))\n".utf8)
        case .json:
            var writer = JSONWriter()
            writer.object { object in
                object.member("at", Timestamp.text(Date()))
                object.member("level", level.rawValue)
                object.member("message", message)
                if let record { object.member("record") { $0.raw(String(decoding: record.last == 0x0A ? record.dropLast() : record[...], as: UTF8.self)) } }
            }
            writer.raw("\n")
            line = writer.bytes
        }
        try? Posix.writeAll(fd, line, path: "the log")
    }
}

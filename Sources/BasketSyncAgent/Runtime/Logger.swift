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

    /// The format and quietness, shared with the loggers ``tagged(cart:)`` makes.
    private final class Settings: Sendable {
        let format: Mutex<LogFormat>
        let quiet = Mutex(false)
        init(format: LogFormat) { self.format = Mutex(format) }
    }

    private let settings: Settings
    private let fd: Int32
    /// The cart of a tree the lines are about, if any: said first in a human line, as `"cart"`
    /// in a JSON one.
    public let cart: String?

    /// A logger writing to `fd` (stderr by default).
    public init(format: LogFormat = .human, fd: Int32 = 2) {
        settings = Settings(format: format)
        self.fd = fd
        cart = nil
    }

    private init(settings: Settings, fd: Int32, cart: String) {
        self.settings = settings
        self.fd = fd
        self.cart = cart
    }

    /// The same log, its lines about cart `cart` of a tree.
    public func tagged(cart: String) -> Logger { Logger(settings: settings, fd: fd, cart: cart) }

    /// The format of the lines; changed on SIGHUP reload.
    public var format: LogFormat {
        get { settings.format.withLock { $0 } }
        set { settings.format.withLock { $0 = newValue } }
    }

    /// Whether info lines are left out (`watch --quiet`): warnings and errors only.
    public var isQuiet: Bool {
        get { settings.quiet.withLock { $0 } }
        set { settings.quiet.withLock { $0 = newValue } }
    }

    /// A warning line made now and written later by a signal handler, which can format nothing
    /// (the JSON format without its time), and the descriptor it goes to.
    func prebuiltWarning(_ message: String) -> (line: [UInt8], fd: Int32) {
        switch format {
        case .human:
            return (Array("basket-sync: \(cart.map { "cart \($0): " } ?? "")warning: \(message)\n".utf8), fd)
        case .json:
            var writer = JSONWriter()
            writer.object { object in
                object.member("level", Level.warning.rawValue)
                object.member("message", message)
            }
            writer.raw("\n")
            return (writer.bytes, fd)
        }
    }

    /// Writes one line, whole (a log that cannot be written is not worth failing for). `record`
    /// is the JSON line of the record the message is about: the JSON format carries it whole.
    public func log(_ level: Level, _ message: String, record: [UInt8]? = nil, evenWhenQuiet: Bool = false) {
        if level == .info, isQuiet, !evenWhenQuiet { return }
        let message = PinnedNames.named(message)
        let line: [UInt8]
        switch format {
        case .human:
            line = Array("basket-sync: \(cart.map { "cart \($0): " } ?? "")\(level == .info ? "" : "\(level.rawValue): ")\(JSONWriter.printable(message))\n".utf8)
        case .json:
            var writer = JSONWriter()
            writer.object { object in
                object.member("at", Timestamp.text(Date()))
                object.member("level", level.rawValue)
                if let cart { object.member("cart", cart) }
                object.member("message", message)
                if let record { object.member("record") { $0.raw(text: String(decoding: record.last == 0x0A ? record.dropLast() : record[...], as: UTF8.self)) } }
            }
            writer.raw("\n")
            line = writer.bytes
        }
        try? Posix.writeAll(fd, line, path: "the log")
    }
}

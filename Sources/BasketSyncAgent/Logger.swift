import BasketSync
import BasketSyncWire
import Glibc

/// Writes the log on stderr: a readable sentence per line, or one JSON object per line.
public final class Logger: @unchecked Sendable {
    /// How serious a line is.
    public enum Level: String, Sendable {
        case info
        case warning
        case error
    }

    /// The format of the lines; changed on SIGHUP reload.
    public var format: LogFormat
    private let fd: Int32

    /// A logger writing to `fd` (stderr by default).
    public init(format: LogFormat = .human, fd: Int32 = 2) {
        self.format = format
        self.fd = fd
    }

    /// Writes one line.
    public func log(_ level: Level, _ message: String) {
        var line: [UInt8]
        switch format {
        case .human:
            line = Array("basket-sync: \(level == .info ? "" : "\(level.rawValue): ")\(message)\n".utf8)
        case .json:
            var writer = JSONWriter()
            writer.raw("{\"at\":")
            writer.string(Timestamp.text(Date()))
            writer.raw(",\"level\":")
            writer.string(level.rawValue)
            writer.raw(",\"message\":")
            writer.string(message)
            writer.raw("}\n")
            line = writer.bytes
        }
        line.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
    }
}

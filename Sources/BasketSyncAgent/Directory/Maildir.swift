import BasketSync
import BasketSyncWire

/// The Maildir the Mealz side delivers into: `tmp/`, `new/`, `cur/` and `bad/` under `inbox/`.
/// Only file operations here; what an event does is the engine's (``SyncEngine/takeInbox()``).
struct Inbox {
    /// The `inbox/` directory.
    let directory: String
    /// Once ``pinned()``: each folder as opened (`/proc/self/fd/N`), where file operations go, so
    /// that a folder swapped for a link meanwhile is never followed.
    private var pins: [String: String] = [:]
    private var descriptors: Descriptors?

    init(directory: String) { self.directory = directory }

    /// The folder `name` (tmp, new, cur, bad), where its files are reached: as opened when pinned.
    func folder(_ name: String) -> String { pins[name] ?? shownFolder(name) }

    /// The folder `name` as people know it, for messages.
    func shownFolder(_ name: String) -> String { "\(directory)/\(name)" }

    /// An entry of `new/` as people know it, for messages.
    func shown(_ name: String) -> String { "\(shownFolder("new"))/\(Inbox.bounded(name))" }

    /// A name as messages quote it: at most 80 characters of it (docs/spec.md §7: any input is quoted
    /// bounded), the rest said by its length. A name is input: whoever delivers chooses it.
    static func bounded(_ name: String) -> String {
        name.count <= 80 ? name : "\(name.prefix(64))…(a name of \(name.utf8.count) bytes)"
    }

    /// The inbox with its folders opened one by one without following a link (`inbox/` from the
    /// sync directory, then each folder; `bad/` made when missing), for one pass or one delivery.
    /// `makingBad`: `cur/` and `bad/` made when missing (a pass moves entries there; a delivery by
    /// another account must not make it: it would be that account's).
    func pinned(makingBad: Bool = true) throws(SystemError) -> Inbox {
        do { return try pinning(makingBad: makingBad) } catch {
            try checkFolders()  // what is in the way, named (a FIFO, a file, a link)
            throw error
        }
    }

    private func pinning(makingBad: Bool) throws(SystemError) -> Inbox {
        var copy = self
        let held = Descriptors()
        // `open` and `openat` refuse a link swapped in after the check (O_NOFOLLOW).
        let base = try Posix.open(directory, [.directory])
        held.fds.append(base)
        for name in ["new", "cur", "bad", "tmp"] {
            let fd: Int32
            do { fd = try Posix.openFolder(named: name, in: base, path: shownFolder(name)) } catch {
                guard error.isMissing else { throw error }
                // Missing: reached by name — but cur/ and bad/, where a pass moves entries, are
                // made again now when they can be (as init makes them).
                guard name == "bad" || name == "cur", makingBad, (try? Posix.makeDirectory("/proc/self/fd/\(base)/\(name)", mode: 0o755)) != nil else { continue }
                fd = try Posix.openFolder(named: name, in: base, path: shownFolder(name))
            }
            held.fds.append(fd)
            copy.pins[name] = "/proc/self/fd/\(fd)"
            PinnedNames.remember(fd, as: shownFolder(name))
        }
        copy.descriptors = held
        return copy
    }

    /// A path named as people know it (a pinned folder's /proc path replaced).
    func shown(path: String) -> String {
        for (name, pin) in pins where path.hasPrefix(pin) {
            let rest = path.dropFirst(pin.count)
            // "/ENTRY": the entry's name bounded as `shown(_:)` bounds it.
            return shownFolder(name) + (rest.hasPrefix("/") ? "/" + Inbox.bounded(String(rest.dropFirst())) : String(rest))
        }
        return path
    }

    /// The error with its paths named as people know them.
    func shown(_ error: SystemError) -> SystemError {
        var error = error
        error.path = shown(path: error.path)
        // A rename's destination is in the operation ("rename to PATH").
        for (name, pin) in pins { error.operation = error.operation.replacingOccurrences(of: pin + "/", with: shownFolder(name) + "/") }
        return error
    }

    /// The error with its paths named as people know them.
    func shown(_ error: AgentError) -> AgentError {
        var result = error
        for (name, pin) in pins { result = result.replacingPathPrefix(pin, with: shownFolder(name)) }
        return result
    }

    /// Closes the folders a pinned inbox holds open when the last copy goes.
    private final class Descriptors {
        var fds: [Int32] = []
        deinit { for fd in fds { Posix.close(fd) } }
    }

    /// The entries waiting in `new/`, in delivery order (dot files are deliveries in progress).
    /// `seen` is the order inotify reported their arrival in, while the agent runs: those come
    /// first, in that order. The others (a scan at start, `sync`) go by the order of their renames
    /// into `new/` as the file system recorded it: change time (ctime, nanoseconds; coarse, so two
    /// deliveries may share one), then the delivery time the Maildir name carries (`1764516000.M99999P…`
    /// is before `1764516000.M100000P…`, though it sorts after as text), then the name.
    func waiting(seen: [String] = []) throws(SystemError) -> [String] {
        try waitingInOrder(seen: seen).names
    }

    /// ``waiting(seen:)``, and the neighbours in that order whose delivery order is unknown: the
    /// same change time and a name without a delivery time on either side (docs/spec.md §4 rule 6: ordered by
    /// name, and reported, since only Maildir names tell two deliveries of one clock tick apart).
    func waitingInOrder(seen: [String] = []) throws(SystemError) -> (names: [String], unordered: [(String, String)]) {
        waitingInOrder(seen: seen, listed: try listNew().names)
    }

    /// `new/` read once: its names, and those no `String` can hold (``setAside(_:)``); empty
    /// when it is not made yet.
    func listNew() throws(SystemError) -> (names: [String], unnamable: [[UInt8]]) {
        if pins.isEmpty { try checkFolders() }  // pinned, the folders were opened without following
        do { return try Posix.listing(of: folder("new") + "/.") } catch {
            if error.isMissing { return ([], []) }  // not made yet: nothing waits
            throw error
        }
    }

    /// ``waitingInOrder(seen:)`` of the names `new/` was found to hold (``listNew()``).
    func waitingInOrder(seen: [String], listed: [String]) -> (names: [String], unordered: [(String, String)]) {
        let names = listed.filter { !$0.hasPrefix(".") }
        // Names compare byte for byte: `café` in NFC and in NFD are two deliveries.
        let present = Set(names.map { ExactID($0) })
        var order = [String]()
        var taken = Set<ExactID>()
        for name in seen where present.contains(ExactID(name)) && taken.insert(ExactID(name)).inserted { order.append(name) }
        let rest = Inbox.deliveryOrder(names.filter { !taken.contains(ExactID($0)) }.map { (name: $0, changed: changed($0)) })
        return (order + rest.names, rest.unordered)
    }

    /// An entry's change time (nanoseconds; the latest possible when it cannot be read).
    func changed(_ name: String) -> Int64 { Posix.info(path(of: name), follow: false)?.changed ?? .max }

    /// Entries in delivery order: by change time, then the delivery time and counter a Maildir
    /// name carries, then the name; and the neighbours whose order is unknown (the same change
    /// time, and a name without a delivery time on either side).
    static func deliveryOrder(_ entries: [(name: String, changed: Int64)]) -> (names: [String], unordered: [(String, String)]) {
        let sorted = entries.map { (name: $0.name, changed: $0.changed, delivered: deliveryTime($0.name)) }
            .sorted { ($0.changed, $0.delivered.0, $0.delivered.1, $0.delivered.2, $0.name) < ($1.changed, $1.delivered.0, $1.delivered.1, $1.delivered.2, $1.name) }
        var unordered: [(String, String)] = []
        for (first, second) in zip(sorted, sorted.dropFirst())
        where first.changed == second.changed && first.changed != .max && (first.delivered == (0, 0, 0) || second.delivered == (0, 0, 0)) {
            unordered.append((first.name, second.name))
        }
        return (sorted.map(\.name), unordered)
    }

    /// The delivery time in a Maildir name, `SECONDS.M<usec>P<pid>Q<n>.host` (Python's
    /// `mailbox.Maildir`, and `push`), `SECONDS.<usec>_<n>.host` or `SECONDS.<anything>`:
    /// seconds, microseconds, the delivery counter; zeros for what a name does not say. A first
    /// number too large for seconds (beyond 10^11, the year 5138) is microseconds: `push` named
    /// its deliveries so before it wrote Maildir names.
    static func deliveryTime(_ name: String) -> (UInt64, UInt64, UInt64) {
        let parts = name.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard let first = parts.first.flatMap({ UInt64($0) }) else { return (0, 0, 0) }
        if first >= 100_000_000_000 { return (first / 1_000_000, first % 1_000_000, 0) }
        let seconds = first
        guard parts.count > 1 else { return (seconds, 0, 0) }
        func number(after marker: Character, in text: Substring) -> UInt64 {
            guard let start = text.firstIndex(of: marker) else { return 0 }
            return UInt64(text[text.index(after: start)...].prefix { $0.isASCII && $0.isNumber }) ?? 0
        }
        let unique = parts[1]
        // `SECONDS.<usec>_<n>.host`: the microseconds first, the counter after `_`.
        if unique.first?.isNumber == true, unique.contains("_") {
            return (seconds, UInt64(unique.prefix { $0.isASCII && $0.isNumber }) ?? 0, number(after: "_", in: unique))
        }
        let micros = unique.hasPrefix("M") ? number(after: "M", in: unique) : 0
        return (seconds, micros, number(after: "Q", in: unique))
    }

    /// Checks that `inbox/` and its folders, where they exist, are directories and not links:
    /// a folder that is a link to a directory elsewhere would have events read, moved and written
    /// outside the sync directory.
    func checkFolders() throws(SystemError) {
        for path in [directory] + ["new", "cur", "bad", "tmp"].map(shownFolder) {
            if let info = Posix.info(path, follow: false), info.kind != .directory { throw SystemError(path: path, shape: info.kind.name, expectsDirectory: true) }
        }
    }

    /// An entry's path in `new/`.
    func path(of name: String) -> String { "\(folder("new"))/\(name)" }

    /// Reads an entry of `new/`; nil when another process took it meanwhile. An entry with other
    /// names (a hard link to a file elsewhere) is refused unread (docs/spec.md §7: nothing outside the
    /// directory is read), but for a `link()` delivery still under way: two names, the other in `tmp/`.
    func read(_ name: String, limit: Int) throws(AgentError) -> [UInt8]? {
        let read: (bytes: [UInt8], info: FileInfo)?
        do {
            read = try Posix.readFileAndInfo(path(of: name), limit: limit)
        } catch {
            // Not readable, and another name for it: a hard link to a file elsewhere, said as
            // such — advice about its owner or mode would be about that file.
            if let info = Posix.info(path(of: name), follow: false), info.kind == .regular, info.links > 1, !isDelivering(name, info) {
                throw Self.hardLinkRefusal(shown(name), links: info.links)
            }
            throw error
        }
        guard let (bytes, info) = read else { return nil }
        if info.links > 1 {
            guard isDelivering(name, info) else { throw Self.hardLinkRefusal(shown(name), links: info.links) }
        }
        return bytes
    }

    /// Whether an entry of two names is a `link()` delivery still under way: its other name in `tmp/`.
    private func isDelivering(_ name: String, _ info: FileInfo) -> Bool {
        let sameFile = { (other: FileInfo?) in other.map { $0.device == info.device && $0.inode == info.inode } == true }
        let tmp = folder("tmp")
        return info.links == 2
            && (sameFile(Posix.info("\(tmp)/\(name)", follow: false)) || Posix.containsName(in: tmp) { sameFile(Posix.info("\(tmp)/\($0)", follow: false)) })
    }

    /// An entry refused unread for its other names.
    private static func hardLinkRefusal(_ shown: String, links: UInt64) -> AgentError {
        .refused("\(shown): has \(links) names (a hard link to a file elsewhere); basket-sync reads no file that may live outside the sync directory: deliver a file of its own through inbox/tmp/ and inbox/new/")
    }

    /// Moves a taken entry from `new/` to `cur/`; another process may have moved it already.
    /// A name `cur/` holds already (a Maildir name used again, or anything else there) is not
    /// replaced: the entry goes there under a name of its own. Returns why it could not be moved,
    /// if it could not, and the name it has in `cur/` when not its own.
    func acknowledge(_ name: String) -> (failure: SystemError?, renamed: String?) {
        var target = name
        if Posix.info("\(folder("cur"))/\(name)", follow: false) != nil {
            target = name.utf8.count > 200 ? "long-name.\(Posix.randomName())" : "\(name).again.\(Posix.randomName())"
        }
        do { try Posix.rename(path(of: name), "\(folder("cur"))/\(target)") } catch {
            // Missing: taken by another process meanwhile — unless the entry is still there (cur/
            // removed since it was opened).
            return (error.isMissing && Posix.info(path(of: name), follow: false) == nil ? nil : error, nil)
        }
        return (nil, target == name ? nil : target)
    }

    /// Whether a name of `bad/` is an entry set aside: not its `.error`, nor a file being written
    /// there (a hidden temporary name, left by a process killed while it wrote).
    static func isSetAside(_ name: String) -> Bool { !name.hasSuffix(".error") && !name.hasPrefix(".") }

    /// Moves an entry to `bad/` with a `.error` file beside it saying why. An entry whose name is
    /// too long for its `.error`, or that `bad/` cannot take under its name, goes there under a
    /// name of its own: it never blocks the entries behind it. Returns its name in `bad/`; nil
    /// when another process took it meanwhile.
    func quarantine(_ name: String, because error: AgentError) throws(SystemError) -> String? {
        let bad = folder("bad")
        // One line, escaped as the log escapes it: a name or value may hold a newline or ESC. It
        // names the file where it lies now, in bad/ (set aside from new/).
        func message(_ base: String) -> [UInt8] {
            let here = error.replacingPathPrefix(shown(name), with: "\(shownFolder("bad"))/\(base)")
            return Array("\(JSONWriter.printable(here.description))\nSet aside from inbox/new/\(JSONWriter.printable(Inbox.bounded(name))). Fix the event and deliver it again through inbox/tmp/ and inbox/new/.\n".utf8)
        }
        try Posix.makeDirectory(bad, mode: 0o755)
        var base = name.utf8.count > 200 ? "long-name.\(Posix.randomName())" : name
        // A name bad/ holds already (the same name delivered bad twice): the first stays, the
        // second goes under a name of its own, as in cur/. In bad/ a name ending in `.error` is
        // a reason, never an entry: an entry named so goes under a name of its own too (kept
        // under its own name, a later entry of the name without `.error` would write its reason
        // over it). So a `.error` alone is no entry's: left by a pass killed before its move, or
        // written by one moving this very entry now — the entry goes beside it, its reason
        // written again.
        if !Inbox.isSetAside(base) || Posix.info("\(bad)/\(base)", follow: false) != nil {
            base = "\(base).again.\(Posix.randomName())"
        }
        for attempt in 0..<2 {
            do {
                try Posix.writeFileAtomically("\(bad)/\(base).error", message(base), replacing: true)
                try Posix.rename(path(of: name), "\(bad)/\(base)")
                return base
            } catch {
                if error.isMissing, Posix.info(path(of: name), follow: false) == nil {
                    // Another process took it meanwhile. One that set it aside under this very
                    // name (both saw it free) wrote this `.error` too, replaced by ours, the same
                    // words: it stays beside the entry. Otherwise it was ours alone.
                    if Posix.info("\(bad)/\(base)", follow: false) == nil { Posix.unlink("\(bad)/\(base).error") }
                    return nil
                }
                Posix.unlink("\(bad)/\(base).error")
                if attempt == 1 { throw error }
                base = "renamed.\(Posix.randomName())"
            }
        }
        return base
    }

    /// Sets aside the entries of `new/` whose names are not UTF-8, as ``listNew()`` found them (no `String` can name them, so
    /// they could be neither read nor moved by name): each goes to `bad/` under a name of its own
    /// with a `.error` beside it. Returns each one's name as shown and its name in `bad/`.
    func setAside(_ unnamable: [[UInt8]]) -> [(shown: String, moved: String)] {
        let new = folder("new")
        var moved: [(shown: String, moved: String)] = []
        for name in unnamable {
            let shown = "\(shownFolder("new"))/\(Posix.shownBytes(name))"
            let base = "renamed.\(Posix.randomName())"
            let message = Array("\(shown): the name is not UTF-8; set aside as bad/\(base). Deliver the event again under a UTF-8 name.\n".utf8)
            do {
                try Posix.makeDirectory(folder("bad"), mode: 0o755)
                try Posix.writeFileAtomically("\(folder("bad"))/\(base).error", message, replacing: true)
                try Posix.renameRaw(in: new, name, to: "\(folder("bad"))/\(base)")
                moved.append((shown, base))
            } catch {
                Posix.unlink("\(folder("bad"))/\(base).error")
            }
        }
        return moved
    }

    /// Delivers an event the Maildir way: written in `tmp/` under a unique name, fsynced, renamed
    /// into `new/`, the directory fsynced.
    func deliver(_ bytes: [UInt8], name: String) throws(SystemError) {
        let temporary = "\(folder("tmp"))/\(name)"
        do {
            let fd = try Posix.open(temporary, [.writeOnly, .create, .exclusive])
            defer { Posix.close(fd) }
            try Posix.writeAll(fd, bytes, path: temporary)
            try Posix.fsync(fd, path: temporary)
        } catch {
            Posix.unlink(temporary)
            throw error
        }
        try Posix.rename(temporary, path(of: name))
        try Posix.fsyncDirectory(folder("new") + "/.")
    }
}

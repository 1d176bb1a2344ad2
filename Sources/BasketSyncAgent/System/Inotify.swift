import CInotifyTools
import Glibc

/// The inotify events the watcher asks for.
package struct InotifyMask: OptionSet, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let closeWrite = InotifyMask(rawValue: UInt32(IN_CLOSE_WRITE))
    package static let modify = InotifyMask(rawValue: UInt32(IN_MODIFY))
    package static let movedTo = InotifyMask(rawValue: UInt32(IN_MOVED_TO))
    package static let movedFrom = InotifyMask(rawValue: UInt32(IN_MOVED_FROM))
    package static let create = InotifyMask(rawValue: UInt32(IN_CREATE))
    package static let delete = InotifyMask(rawValue: UInt32(IN_DELETE))
    package static let deleteSelf = InotifyMask(rawValue: UInt32(IN_DELETE_SELF))
    package static let moveSelf = InotifyMask(rawValue: UInt32(IN_MOVE_SELF))
    package static let onlyDirectory = InotifyMask(rawValue: UInt32(IN_ONLYDIR))
    package static let ignored = InotifyMask(rawValue: UInt32(IN_IGNORED))
    package static let overflow = InotifyMask(rawValue: UInt32(IN_Q_OVERFLOW))
    package static let dontFollow = InotifyMask(rawValue: UInt32(IN_DONT_FOLLOW))
}

/// One event read from the inotify descriptor.
package struct InotifyEvent {
    /// The watch it came from; negative for a queue overflow.
    package var watch: Int32
    package var mask: InotifyMask
    /// The name inside the watched directory, empty for the directory itself.
    package var name: String
}

/// libinotifytools, the one inotify instance of the process. The library places the watches and
/// names what a watch descriptor watches; the descriptor is polled and read here, so that no
/// thread and no pipe stand between an event and its handling (the library's own `next_event`
/// blocks, and cannot share a `poll`).
///
/// The library keeps process-wide state: one owner, on one thread, and not `Sendable`.
package final class Inotify {
    /// The inotify descriptor, non-blocking, for the event loop to poll.
    package let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    package init(path: String) throws(SystemError) {
        guard inotifytools_initialize() != 0 else {
            throw SystemError(operation: "inotify_init", path: path, code: inotifytools_error())
        }
        guard let descriptor = Inotify.descriptor() else {
            throw SystemError(operation: "find the inotify descriptor", path: "/proc/self/fd", code: ENOENT)
        }
        fd = descriptor
        Posix.setNonBlocking(fd)
    }

    /// The library keeps its inotify descriptor to itself: it is the process's one inotify
    /// instance, found among the open descriptors.
    private static func descriptor() -> Int32? {
        for name in Posix.listDirectory("/proc/self/fd") {
            guard let number = Int32(name) else { continue }
            if Posix.linkTarget("/proc/self/fd/\(name)") == "anon_inode:inotify" { return number }
        }
        return nil
    }

    /// Watches a directory; throws when it cannot (it does not exist, or the limit is reached).
    package func watch(_ path: String, _ mask: InotifyMask) throws(SystemError) {
        guard inotifytools_watch_file(path, Int32(bitPattern: mask.rawValue)) != 0 else {
            throw SystemError(operation: "watch", path: path, code: inotifytools_error())
        }
        // The library names a directory with a trailing slash, a file without.
        if let watch = watchDescriptor(path.hasSuffix("/") ? path : path + "/") ?? watchDescriptor(path) { live.insert(watch) }
    }

    /// The watches this instance holds now: each placed, until the kernel says it is gone
    /// (`IN_IGNORED`: removed, or its directory deleted). The kernel keeps one watch per
    /// directory, so a directory watched again is counted once.
    private var live = Set<Int32>()

    /// How many watches this instance holds now (see ``live``): what it takes of the limit.
    package var liveWatches: Int { live.count }

    /// Watches `path`, a folder under `base`, never through a link: the folders between are
    /// opened one by one without following one, and the last is watched with `IN_DONT_FOLLOW`
    /// (a folder that is a link, or swapped for one meanwhile, is refused — never a watch out of
    /// the directory). The watch is named `path` (with a trailing slash, as the library names a
    /// directory), whatever it was reached through.
    package func watch(_ path: String, _ mask: InotifyMask, under base: String) throws(SystemError) {
        // The base itself is followed as named (the operator's directory may be a link).
        guard path != base else { return try watch(path, mask) }
        let mask = mask.union(.dontFollow)
        guard path.hasPrefix(base + "/") else { return try watch(path, mask) }
        let relative = String(path.dropFirst(base.count + 1))
        guard relative.contains("/") else {
            // Right under the base: nothing between to pin; named here too, so that the name
            // follows the latest placement (see ``removeWatch(named:)``).
            let watch = inotify_add_watch(fd, path, mask.rawValue)
            guard watch >= 0 else { throw .last("watch", path) }
            name(watch, path)
            return
        }
        do throws(AgentError) {
            // Placed here, not by the library: its records go by name, and this name is a descriptor's.
            try Posix.withPinnedFolders(base: base, relative: relative) { (pinned) throws(AgentError) in
                let watch = inotify_add_watch(fd, pinned, mask.rawValue)
                guard watch >= 0 else { throw .system(.last("watch", path)) }
                name(watch, path)
            }
        } catch {
            guard case let .system(failure) = error else { throw SystemError(operation: "watch", path: path, code: EIO) }
            throw failure
        }
    }

    /// Watches `folder` and `leaves` in it as ``watch(_:_:under:)`` would each, the folders on
    /// the way opened once for all of them (a cart's `inbox/`, `new/` and `tmp/`: three chains of
    /// folders opened were a tenth of a start's system calls). The folder is watched through its
    /// descriptor, so never through a link. A leaf that cannot be watched throws once the
    /// others are placed; the folder's own watch that fails is said by the result (false).
    package func watch(_ folder: String, _ mask: InotifyMask, leaves: [(name: String, mask: InotifyMask)], under base: String) throws(SystemError) -> Bool {
        guard let first = leaves.first, folder.hasPrefix(base + "/") else {
            for leaf in leaves { try watch("\(folder)/\(leaf.name)", leaf.mask, under: base) }
            return (try? watch(folder, mask, under: base)) != nil
        }
        let relative = String(folder.dropFirst(base.count + 1))
        var folderWatched = false
        do throws(AgentError) {
            try Posix.withPinnedFolders(base: base, relative: "\(relative)/\(first.name)") { (pinned) throws(AgentError) in
                let pinnedFolder = Posix.dirname(of: pinned)
                // The descriptor's link leads to the folder as opened, whatever its name is now.
                let watch = inotify_add_watch(fd, pinnedFolder, mask.rawValue)
                var failure: SystemError?
                if watch >= 0 {
                    name(watch, folder)
                    folderWatched = true
                } else if errno == ENOSPC {
                    // No watch left: said, as a leaf's failure is (the caller polls instead).
                    failure = .last("watch", folder)
                }
                for leaf in leaves {
                    let path = "\(folder)/\(leaf.name)"
                    let watch = inotify_add_watch(fd, "\(pinnedFolder)/\(leaf.name)", leaf.mask.union(.dontFollow).rawValue)
                    guard watch >= 0 else {
                        if failure == nil { failure = .last("watch", path) }
                        continue
                    }
                    name(watch, path)
                }
                if let failure { throw .system(failure) }
            }
        } catch {
            guard case let .system(failure) = error else { throw SystemError(operation: "watch", path: folder, code: EIO) }
            throw failure
        }
        return folderWatched
    }

    /// The watches placed by ``watch(_:_:under:)``, by descriptor, with their names; and the
    /// latest by name.
    private var aliases: [Int32: String] = [:]
    private var aliased: [String: Int32] = [:]

    /// Records that `watch` is the watch of the directory `path` (named with a trailing slash, as
    /// the library names a directory): the latest placement names it.
    private func name(_ watch: Int32, _ path: String) {
        live.insert(watch)
        aliases[watch] = path + "/"
        aliased[path + "/"] = watch
    }

    /// Removes a watch, silently when the kernel already did (its directory was deleted; the
    /// library would print an error). The library's record of its path stays: it names a
    /// descriptor no event comes from any more.
    package func removeWatch(_ watch: Int32) { _ = inotify_rm_watch(fd, watch) }

    /// Removes the watch placed under `name` (a directory's path with its trailing slash),
    /// unless it has been placed since under another name: the kernel keeps one watch per
    /// directory (inode), so a directory renamed or swapped and watched again under its new
    /// name — another cart's now — shares the descriptor, and is that cart's to remove.
    package func removeWatch(named name: String) {
        guard let watch = watchDescriptor(name) else { return }
        aliased[name] = nil
        if let owner = aliases[watch], owner != name { return }
        removeWatch(watch)
    }

    /// The watch descriptor of a watched path; nil when it is not watched.
    package func watchDescriptor(_ path: String) -> Int32? {
        if let alias = aliased[path] { return alias }
        let watch = inotifytools_wd_from_filename(path)
        return watch > 0 ? watch : nil
    }

    /// The path a watch descriptor watches, as the library recorded it.
    package func path(of watch: Int32) -> String? {
        aliases[watch] ?? inotifytools_filename_from_wd(watch).map { String(cString: $0) }
    }

    /// Every event waiting on the descriptor; empty when none (it never blocks).
    package func events() throws(SystemError) -> [InotifyEvent] {
        var events: [InotifyEvent] = []
        let header = MemoryLayout<inotify_event>.size
        while true {
            let read = try buffer.withUnsafeMutableBytes { raw in
                Result { () throws(SystemError) in try Posix.read(fd, into: raw, path: "inotify") }
            }.get()
            guard let count = read, count > 0 else { return events }
            var offset = 0
            while offset + header <= count {
                let event = buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self) }
                let length = Int(event.len)
                let name = length == 0 ? "" : String(decoding: buffer[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }, as: UTF8.self)
                if event.mask & UInt32(IN_IGNORED) != 0 { live.remove(event.wd) }
                events.append(InotifyEvent(watch: event.wd, mask: InotifyMask(rawValue: event.mask), name: name))
                offset += header + length
            }
        }
    }
}

import Glibc
import BasketSyncWire

/// A directory shared between accounts (docs/spec.md §7): the agent's account owns it, the host
/// and the Mealz side write it as members of one group. Its folders are setgid (what is made
/// there belongs to the group) and sticky (nobody renames or removes another's file); the
/// configuration and `.basket-sync/` stay the agent's alone.
enum Shared {
    /// A shared directory or folder: setgid, sticky, the group may write.
    static let openMode: UInt32 = 0o3770
    /// A folder the group reads but never writes (inbox/, cur/, bad/): setgid.
    static let readMode: UInt32 = 0o2750

    /// Whether `directory` is set up shared: group-writable with the sticky bit.
    static func isShared(_ directory: String) -> Bool {
        guard let info = Posix.info(directory, follow: false), info.kind == .directory else { return false }
        return info.mode & 0o1000 != 0 && info.mode & 0o020 != 0
    }

    /// The group `name` (a name, or a number) as a gid.
    static func group(_ name: String) throws(AgentError) -> gid_t {
        if let entry = getgrnam(name) { return entry.pointee.gr_gid }
        if let number = UInt32(name) { return gid_t(number) }
        throw .usage("init --shared \(name): no such group; name a group the host's and the Mealz side's accounts are members of (getent group)")
    }

    /// Gives `path` to `group` with `mode`, through a descriptor opened without following a link
    /// (a folder swapped for a link meanwhile — the cart's directory is the host's — is never
    /// followed), and only when it is this account's own directory or regular file.
    static func set(_ path: String, group: gid_t, mode: UInt32) throws(AgentError) {
        guard let fd = (try? Posix.open(path, [.directory])) ?? (try? Posix.open(path, [.readOnly])) else { return }
        defer { Posix.close(fd) }
        guard let info = try? Posix.fileInfo(fd, path: path), info.owner == geteuid() else { return }
        if fchown(fd, uid_t.max, group) != 0 {
            throw .system(SystemError(operation: "give it to group \(group) (chgrp)", path: path, code: errno))
        }
        if fchmod(fd, mode_t(mode)) != 0 {
            throw .system(SystemError(operation: "chmod \(Trust.octal(mode))", path: path, code: errno))
        }
    }

    /// An inbox's folders as a shared directory needs them: the group delivers into tmp/ and new/
    /// (sticky: one member cannot take another's delivery away), and reads cur/ and bad/.
    static func shareInbox(of directory: String, group: gid_t) throws(AgentError) {
        try set("\(directory)/inbox", group: group, mode: readMode)
        // Each folder reached through inbox/ opened without following a link.
        // A folder that cannot be opened so is left as it is, as ``set(_:group:mode:)`` leaves it.
        for folder in ["tmp", "new", "cur", "bad"] {
            var failure: AgentError?
            try? Posix.withPinnedFolders(base: directory, relative: "inbox/\(folder)") { (pinned) throws(AgentError) in
                do throws(AgentError) { try set(pinned, group: group, mode: ["tmp", "new"].contains(folder) ? openMode : readMode) } catch { failure = error }
            }
            if let failure { throw failure }
        }
    }

    /// The output files the group reads.
    static func shareOutputs(of directory: String, group: gid_t) throws(AgentError) {
        for projection in Projection.allCases { try set("\(directory)/\(projection.fileName)", group: group, mode: 0o640) }
    }

    /// A cart the agent makes in a shared tree: its folders as the tree's (its directory takes
    /// the root's group through setgid).
    static func shareCart(_ directory: String, root: String) throws(AgentError) {
        guard isShared(root), let info = Posix.info(root, follow: false) else { return }
        try set(directory, group: info.group, mode: openMode)  // only when the agent made it
        try shareInbox(of: directory, group: info.group)
    }
}

extension Commands {
    /// Checks, before `init` makes anything, that `--shared GROUP` names a group this account
    /// may give its files to (it exists; root, or a member): a usage error leaves nothing made.
    public static func checkShareGroup(_ name: String) throws(AgentError) {
        let group = try Shared.group(name)
        guard geteuid() != 0, getegid() != group else { return }
        let count = getgroups(0, nil)
        var groups = [gid_t](repeating: 0, count: Int(max(count, 0)))
        if count > 0, getgroups(count, &groups) >= 0, groups.contains(group) { return }
        if getgrgid(group) == nil {
            throw .usage("init --shared \(name): no group has that id on this machine (getent group \(name)); name a group the host's and the Mealz side's accounts are members of")
        }
        throw .usage("init --shared \(name): this account (uid \(geteuid())) is not a member of that group, and may not give its files to it; add it to the group (usermod -aG \(name) USER, then log in again), or run init as root")
    }

    /// `init --shared GROUP`: sets `directory` (a sync directory or a tree's root, made first)
    /// up for accounts of `group` — the host and the Mealz side — beside the agent's: the
    /// directory setgid and sticky, writable by the group; the inbox's tmp/ and new/ likewise;
    /// the configuration readable by the group; `.basket-sync/` the agent's alone. Returns what
    /// it set, one line each.
    public static func share(directory: String, group name: String) throws(AgentError) -> [String] {
        let group = try Shared.group(name)
        var done: [String] = []
        try Shared.set(directory, group: group, mode: Shared.openMode)
        done.append("\(directory) shared with group \(name): setgid, sticky, group-writable (\(Trust.octal(Shared.openMode)))")
        try Shared.set("\(directory)/\(AgentConfiguration.fileName)", group: group, mode: 0o640)
        if case .treeRoot = Workspace.of(directory) {
            let tree = try Tree(root: directory)
            for id in try tree.cartDirectories() {
                try Shared.shareCart("\(directory)/\(id)", root: directory)
                try Shared.shareOutputs(of: "\(directory)/\(id)", group: group)
            }
            done.append("\(directory)/*/inbox: tmp/ and new/ writable by the group, each cart as it is made")
        } else {
            try Shared.shareInbox(of: directory, group: group)
            try Shared.shareOutputs(of: directory, group: group)
            done.append("\(directory)/inbox: tmp/ and new/ writable by the group")
        }
        done.append("\(directory)/\(Layout.stateDirectory)/ and \(AgentConfiguration.fileName): the agent's account's alone")
        return done
    }
}

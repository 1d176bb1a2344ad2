import BasketSyncAgent

/// The manual page and the bash completion, made from the help texts (``Help``): one source of
/// truth for what each command takes.
enum Manual {
    /// The options a command's help text shows on its `usage:` lines (`--json`, `--poll`…).
    static func options(of command: String) -> [String] {
        var options: [String] = []
        var inUsage = false
        for line in Help.text(for: command).split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }
            if trimmed.hasPrefix("usage:") { inUsage = true } else if trimmed.isEmpty { inUsage = false }
            guard inUsage else { continue }
            var token = ""
            for character in trimmed + " " {
                if character.isLetter || character.isNumber || character == "-" {
                    token.append(character)
                    continue
                }
                if token.hasPrefix("--"), token.count > 2, !options.contains(token) { options.append(token) }
                token = ""
            }
        }
        return options
    }

    /// `basket-sync completion bash`.
    static var bashCompletion: String {
        var cases = ""
        for command in Invocation.commands {
            let words = (options(of: command) + ["--help"]).joined(separator: " ")
            cases += "        \(command)) words=\"\(words)\" ;;\n"
        }
        return """
            # bash completion for basket-sync \(basketSyncVersion) (basket-sync completion bash)
            _basket_sync() {
                local current=${COMP_WORDS[COMP_CWORD]} previous=${COMP_WORDS[COMP_CWORD-1]}
                # One candidate per line: a name with a space stays one name.
                local IFS=$'\n'
                case $previous in
                    -C|--dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$current")); return ;;
                    --products|--then) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$current")); return ;;
                    --log-format) COMPREPLY=($(compgen -W "human"$'\n'"json" -- "$current")); return ;;
                    --mode) COMPREPLY=($(compgen -W "retailer"$'\n'"standalone" -- "$current")); return ;;
                    completion) COMPREPLY=($(compgen -W "bash" -- "$current")); return ;;
                esac
                local index=1 command=""
                while [ $index -lt $COMP_CWORD ]; do
                    case ${COMP_WORDS[index]} in
                        -C|--dir) index=$((index + 2)); continue ;;
                        -*) ;;
                        *) command=${COMP_WORDS[index]}; break ;;
                    esac
                    index=$((index + 1))
                done
                if [ -z "$command" ]; then
                    local all="\(Invocation.commands.joined(separator: " ")) -C --dir --help --version"
                    COMPREPLY=($(compgen -W "${all// /$'\n'}" -- "$current"))
                    return
                fi
                local words=""
                case $command in
            \(cases)    esac
                words=${words// /$'\n'}
                case $command in
                    validate) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -W "$words" -- "$current")) ;;
                    *) COMPREPLY=($(compgen -W "$words" -- "$current")) ;;
                esac
            }
            complete -F _basket_sync basket-sync

            """
    }

    /// Text for roff: backslashes and hyphens escaped, a line never starting with a control character.
    static func roff(_ line: Substring) -> String {
        var text = ""
        for scalar in line.unicodeScalars {
            switch scalar {
            case "\\": text += "\\e"
            case "-": text += "\\-"
            // groff reads ASCII: anything else by its code point (— as \[u2014]).
            case _ where scalar.value > 0x7E:
                let hex = String(scalar.value, radix: 16, uppercase: true)
                text += "\\[u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex + "]"
            default: text.unicodeScalars.append(scalar)
            }
        }
        if text.hasPrefix(".") || text.hasPrefix("'") { text = "\\&" + text }
        return text
    }

    /// A help text as a preformatted block (its layout kept as the terminal shows it).
    private static func block(_ text: String) -> String {
        var lines = [".nf"]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let body = line.hasPrefix("    ") ? line.dropFirst(4) : line
            lines.append(body.isEmpty ? "" : roff(body))
        }
        while lines.last == "" { lines.removeLast() }
        lines.append(".fi")
        return lines.joined(separator: "\n")
    }

    /// `basket-sync man`: basket-sync(1) in roff.
    static var page: String {
        let overview = Help.overview.split(separator: "\n", omittingEmptySubsequences: false)
        let body = overview.drop { !$0.hasPrefix("usage:") }.dropFirst().joined(separator: "\n")
        var page = """
            .TH BASKET\\-SYNC 1 "\(basketSyncDate)" "basket\\-sync \(basketSyncVersion)" "User Commands"
            .SH NAME
            basket\\-sync \\- keeps a retailer cart and the Mealz basket aligned
            .SH SYNOPSIS
            .B basket\\-sync
            [\\fB\\-C\\fR \\fIDIR\\fR | \\fB\\-\\-dir\\fR \\fIDIR\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]
            .SH DESCRIPTION
            \(block(body))
            .SH COMMANDS

            """
        for command in Invocation.commands {
            page += ".SS \(roff(command[...]))\n\(block(Help.text(for: command)))\n"
        }
        page += """
            .SH FILES
            .TP
            .I basket\\-sync.json
            the settings of a sync directory, or of a tree of carts (JSON with // comments)
            .TP
            .I cart.json
            the host's cart (the "cart" setting): absolute quantities, and syncedThrough
            .TP
            .I inbox/tmp, inbox/new, inbox/cur, inbox/bad
            Mealz events delivered the Maildir way, taken, set aside
            .TP
            .I outbox.jsonl, notifications.jsonl, payments.jsonl
            the records, one JSON object per line, seq contiguous
            .TP
            .I .basket\\-sync/state.db
            the SQLite database (one per sync directory, one per tree)
            .SH EXIT STATUS
            0 ok; 64 usage; 65 bad data; 66 missing input; 73 cannot create output; 74 I/O or
            database error; 75 busy or temporary (try again); 78 configuration (sysexits).
            .SH ENVIRONMENT
            .TP
            .B BASKET_SYNC_DIR
            the sync directory when \\fB\\-C\\fR is not given (else the current directory)
            .TP
            .B BASKET_SYNC_WATCH_MODE
            auto, inotify, poll or poll=MS: how \\fBwatch\\fR sees changes (wins over basket\\-sync.json)
            .TP
            .B BASKET_SYNC_MAX_WATCHES
            lowers the inotify watches a tree's agent uses (the carts beyond are polled)
            .TP
            .B BASKET_SYNC_FLUSH_SECONDS
            how long the agent leaves written lines unflushed (0 to 3600; default 0.5)
            .SH SIGNALS
            \\fBwatch\\fR stops on SIGTERM or SIGINT (exit 0) and reads basket\\-sync.json again on SIGHUP.

            """
        return page
    }
}

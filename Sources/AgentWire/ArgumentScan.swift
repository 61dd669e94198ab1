// keymgr's command line as the lean client, the agent's worker and the full program's fast paths read it before
// (or instead of) the argument parser: which options take a value, where `--` ends the options, the global options,
// the command's words, and the options that name files. One scanner, so the client and the worker never disagree
// on what an argument is. The argument parser still parses the whole line; this scanner only finds things in it.
//
// No Foundation: the lean client links this module.

/// How a command reaches a file an option names: read it, or create it (a new file, mode 0600).
public enum NamedFileAccess: String, Equatable, Sendable {
    case read
    case create
}

/// A file an option of the command line names: the option (`--metadata`), the path as given, and how the command
/// uses it. Through the agent, the client opens it with the caller's own rights and passes the descriptor.
public struct NamedFileArgument: Equatable, Sendable {
    public var option: String
    public var path: String
    public var access: NamedFileAccess

    public init(option: String, path: String, access: NamedFileAccess) {
        self.option = option
        self.path = path
        self.access = access
    }

    /// Why the caller could not open the file, as keymgr says it wherever it opens one (the client, or keymgr run
    /// directly): whose rights failed, and the system's reason. `uid` is the caller's.
    public static func refusal(path: String, access: NamedFileAccess, uid: UInt32, reason: String) -> String {
        let verb = access == .read ? "read" : "create"
        return "you (uid \(uid)) cannot \(verb) \(path): \(reason)"
    }
}

/// keymgr's arguments (without the program name) read once: the options before `--` with their values, the words,
/// and what follows `--`.
///
/// An option takes a value when it is one of `valueOptions` (every option of keymgr's commands that takes one, held
/// to the argument parser's declarations by `ArgumentScanTests` in keymgrTests): `--name=value`, or `--name value`
/// when the next argument does not start with `-` (or is `-` alone), as the argument parser reads it. Any other
/// option is a flag; `--name=value` is kept with its value either way, for the caller to judge.
public struct ArgumentScan: Equatable, Sendable {
    /// One argument before `--`, as scanned.
    public enum Element: Equatable, Sendable {
        /// `--name`, `--name=value`, `--name value` (name with its dashes) or a short `-x` (with the value that
        /// follows it when it takes one).
        case option(name: String, value: String?, inline: Bool)
        /// Anything that is no option: a command's name, or a positional argument.
        case word(String)
    }

    /// The options keymgr's commands declare that take a value, long and short. `ArgumentScanTests` holds this list to
    /// the argument parser's: an option added to a command fails there until it is added here.
    public static let valueOptions: Set<String> = [
        "--argon2-iterations", "--argon2-memory", "--argon2-parallelism", "--auth-type", "--base-url", "--before",
        "--biometric-verifier", "--challenge", "--claim", "--concurrency", "--credential-file", "--credential-header",
        "--credential-verifier", "--days", "--device", "--device-authorization-endpoint", "--device-id",
        "--device-name", "--dialect", "--event", "--expires-in", "--format", "--home", "--htm", "--htu", "--idle-exit",
        "--initial-access-token-file", "--input", "--issuer", "--journal", "--journey", "--key-backend", "--kid",
        "--master-key", "--max-revoke", "--max-workers", "--max-workers-per-user", "--metadata",
        "--min-ttl", "--newest", "--nonce", "--output", "--password-fd", "--pin-fd", "--pin-min-length", "--pin-retry",
        "--policy", "--profile", "--realm-path", "--reason", "--registration-endpoint",
        "--revocation-endpoint", "--scope", "--since", "--socket", "--software-id", "--status", "--timeout",
        "--token-endpoint", "--tpm-max-tries", "--tpm-recovery-time", "--tpm-tcti", "--user", "--username",
        "--warm-workers", "-n",
    ]

    /// The options that name a file, by the command (its words, `dcr register`) that declares them. Through the agent
    /// the client opens each with the caller's rights and passes the descriptor; keymgr run directly opens it itself.
    /// `ArgumentScanTests` holds this list to every option whose value is a `file` in the argument parser's help.
    public static let fileOptions: [String: [String: NamedFileAccess]] = [
        "server set": ["--credential-file": .read],
        "dcr register": ["--metadata": .read, "--initial-access-token-file": .read],
        "audit archive": ["--output": .create],
        "audit verify": ["--input": .read, "--journal": .read],
    ]

    /// The options keymgr-core takes before or after any command: the store, the agent's socket (the client's), and
    /// how keymgr talks.
    public static let globalOptions: Set<String> = ["--home", "--socket", "--json", "--quiet", "--verbose"]

    /// The arguments before `--`, in order.
    public private(set) var elements: [Element] = []
    /// True when the arguments hold `--`.
    public private(set) var hasTerminator = false
    /// The arguments after `--`.
    public private(set) var operands: [String] = []

    /// Scans `arguments` (without the program name).
    public init(_ arguments: some Sequence<String>, valueOptions: Set<String> = ArgumentScan.valueOptions) {
        let all = Array(arguments)
        var index = 0
        while index < all.count {
            let argument = all[index]
            index += 1
            if argument == "--" {
                hasTerminator = true
                operands = Array(all[index...])
                return
            }
            guard argument.hasPrefix("-"), argument != "-" else {
                elements.append(.word(argument))
                continue
            }
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                elements.append(.option(name: String(argument[..<equals]),
                                        value: String(argument[argument.index(after: equals)...]), inline: true))
                continue
            }
            var value: String?
            if valueOptions.contains(argument), index < all.count, !all[index].hasPrefix("-") || all[index] == "-" {
                value = all[index]
                index += 1
            }
            elements.append(.option(name: argument, value: value, inline: false))
        }
    }

    /// The arguments of a shell's completion request (`words`: the program name first), with bash's split of
    /// `--name=value` into `--name`, `=`, `value` put back together.
    public init(completionWords words: [String]) {
        var joined: [String] = []
        var index = words.isEmpty ? words.endIndex : words.index(after: words.startIndex)
        while index < words.endIndex {
            let word = words[index]
            if word == "=", let previous = joined.last, previous.hasPrefix("--"), !previous.contains("=") {
                joined[joined.count - 1] = previous + "=" + (index + 1 < words.endIndex ? words[index + 1] : "")
                index += 2
                continue
            }
            joined.append(word)
            index += 1
        }
        self.init(joined)
    }

    /// The words before `--` that are no option or option value, in order: the command's names first.
    public var words: [String] {
        elements.compactMap { if case .word(let word) = $0 { return word } else { return nil } }
    }

    /// The first word: the command (`status`, `dcr`), or nil when there is none.
    public var subcommand: String? { words.first }

    /// Every value given to `option` (long or short, with its dashes), in order; a value-less occurrence is left out.
    public func values(of option: String) -> [String] {
        elements.compactMap { element in
            if case .option(option, let value?, _) = element { return value } else { return nil }
        }
    }

    /// The last value given to `option` (the one the argument parser keeps), or nil.
    public func value(of option: String) -> String? { values(of: option).last }

    /// Whether `option` appears at all, with or without a value.
    public func has(_ option: String) -> Bool {
        elements.contains { if case .option(option, _, _) = $0 { return true } else { return false } }
    }

    /// The files the command's options name (the last of each option, as the argument parser keeps), in the order of
    /// the options' last appearance.
    public var namedFiles: [NamedFileArgument] {
        let names = words
        guard names.count >= 2, let options = Self.fileOptions[names[0] + " " + names[1]] else { return [] }
        var files: [NamedFileArgument] = []
        for element in elements {
            guard case .option(let name, let value?, _) = element, let access = options[name] else { continue }
            files.removeAll { $0.option == name }
            files.append(NamedFileArgument(option: name, path: value, access: access))
        }
        return files
    }
}

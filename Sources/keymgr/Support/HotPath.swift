import AgentWire
import ArgumentParser

/// `status` and `sign`, the commands a shared device runs most, parsed without the argument parser's reflection.
///
/// The argument parser learns a command's options by reflecting over its properties, and the conformance look-ups
/// that takes are most of a short command's start-up: 15 M of `status`'s 41 M instructions, 22 M of `sign`'s 67 M
/// (issue 14; benchmarks/README.md). This parser takes only the plain shapes of these two command lines: the options
/// below, long and spelled out, as `--name value` or `--name=value`, each option other than `--claim` at most once,
/// no value that is empty or starts with `-`. It builds the same command values the argument parser would and runs
/// the same `validate()`s. For anything else — help, `--version`, a short or unknown option, a repeat, a value its
/// type refuses, a failed validation — it answers nil and the argument parser parses the whole command line as
/// before, so usage errors, help and their exit statuses stay the argument parser's own.
///
/// `HotPathParserTests` holds it to that: its options must be exactly the ones the argument parser declares for
/// the two commands, and every command line it takes must parse to the same values both ways.
enum HotPathParser {
    /// An option as this parser knows it: its long name, and whether it takes a value and may repeat.
    struct Spec: Equatable {
        let name: String
        let takesValue: Bool
        var repeatable = false
    }

    static let globalOptions = [
        Spec(name: "home", takesValue: true), Spec(name: "json", takesValue: false),
        Spec(name: "quiet", takesValue: false), Spec(name: "verbose", takesValue: false),
    ]

    /// Each command's own options, after the global ones.
    static let commandOptions: [String: [Spec]] = [
        Status.configuration.commandName!: [],
        Sign.configuration.commandName!: [
            Spec(name: "user", takesValue: true), Spec(name: "kid", takesValue: true),
            Spec(name: "claim", takesValue: true, repeatable: true),
            Spec(name: "challenge", takesValue: true), Spec(name: "issuer", takesValue: true),
            Spec(name: "expires-in", takesValue: true), Spec(name: "timeout", takesValue: true),
            Spec(name: "pin-stdin", takesValue: false), Spec(name: "pin-fd", takesValue: true),
            Spec(name: "journey", takesValue: true), Spec(name: "password-fd", takesValue: true),
            Spec(name: "profile", takesValue: true),
        ],
    ]

    /// The command `arguments` (without the program name) spell, or nil when the argument parser must decide.
    static func command(for arguments: [String]) -> (any KeymgrCommand)? {
        guard let given = scan(arguments) else { return nil }
        do {
            switch given.command {
            case Status.configuration.commandName:
                var status = Status()
                status.globals = try globals(given.values)
                return status
            case Sign.configuration.commandName:
                return try sign(given.values)
            default:
                return nil
            }
        } catch {
            // A value its type refuses or a failed validate(): the argument parser says what is wrong.
            return nil
        }
    }

    /// The command's name and the values given for each option (`""` for a flag), or nil for any other shape. Read
    /// with `ArgumentScan`, the scanner the client and the agent's worker use.
    private static func scan(_ arguments: [String]) -> (command: String, values: [String: [String]])? {
        let scan = ArgumentScan(arguments)
        guard !scan.hasTerminator else { return nil }
        var command: String?
        var specs = globalOptions
        var values: [String: [String]] = [:]
        for element in scan.elements {
            switch element {
            case .word(let word):
                // The first word names the command; any other is the argument parser's to refuse.
                guard command == nil, let own = commandOptions[word] else { return nil }
                command = word
                specs += own
            case .option(let option, let value, let inline):
                // Long options only, spelled out; a short one (`-q`) is the argument parser's.
                guard option.hasPrefix("--"), option.count > 2 else { return nil }
                let name = String(option.dropFirst(2))
                guard let spec = specs.first(where: { $0.name == name }) else { return nil }
                if spec.takesValue {
                    guard let value, !value.isEmpty, !value.hasPrefix("-") else { return nil }
                } else if inline {
                    return nil
                }
                guard spec.repeatable || values[name] == nil else { return nil }
                values[name, default: []].append(value ?? "")
            }
        }
        guard let command else { return nil }
        return (command, values)
    }

    private static func globals(_ values: [String: [String]]) throws -> GlobalOptions {
        var globals = GlobalOptions()
        globals.home = values["home"]?.last
        globals.json = values["json"] != nil
        globals.quiet = values["quiet"] != nil
        globals.verbose = values["verbose"] != nil
        try globals.validate()
        return globals
    }

    private static func sign(_ values: [String: [String]]) throws -> Sign {
        var jws = JWSOptions()
        jws.challenge = values["challenge"]?.last
        jws.issuer = values["issuer"]?.last
        jws.expiresIn = try converted(values["expires-in"])
        jws.timeout = try converted(values["timeout"])
        try jws.validate()

        var pin = PINOptions()
        pin.pinStdin = values["pin-stdin"] != nil
        pin.pinFd = try converted(values["pin-fd"])
        try pin.validate()

        var journey = JourneyOptions()
        journey.journey = values["journey"]?.last
        journey.passwordFd = try converted(values["password-fd"])
        var server = ProfileOptions()
        server.profile = values["profile"]?.last ?? Server.profileName
        journey.server = server
        try journey.validate()

        var sign = Sign()
        sign.globals = try globals(values)
        sign.user = values["user"]?.last
        sign.kid = values["kid"]?.last
        sign.claims = values["claim"] ?? []
        sign.jws = jws
        sign.pin = pin
        sign.journey = journey
        try sign.validate()
        return sign
    }

    /// A value read as the argument parser reads it (`ExpressibleByArgument`); nil when not given.
    private static func converted<Value: ExpressibleByArgument>(_ given: [String]?) throws -> Value? {
        guard let text = given?.last else { return nil }
        guard let value = Value(argument: text) else { throw ValidationError("not a value of its type") }
        return value
    }
}

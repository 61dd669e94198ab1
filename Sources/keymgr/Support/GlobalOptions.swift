import ArgumentParser
import Foundation
import KeyManager
import Logging

/// The options every keymgr command takes: where the store lives and how keymgr talks.
///
/// Declared on the root command and on every subcommand, so they may come before or after the subcommand name.
struct GlobalOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The store's directory (default: $KEYMGR_HOME, else ${XDG_DATA_HOME:-~/.local/share}/keymgr).",
            valueName: "dir"),
        completion: .directory)
    var home: String?

    @Flag(help: "Print the result as JSON on stdout and nothing else there; errors as {\"error\":{\"code\",\"message\"}}.")
    var json = false

    @Flag(help: "Print only results and errors: no confirmations or warnings.")
    var quiet = false

    @Flag(help: "Say on stderr what keymgr is doing.")
    var verbose = false

    func validate() throws {
        if quiet && verbose { throw ValidationError("--quiet and --verbose cannot be used together") }
        // Nothing but what Foundation's `.whitespaces` trims (tab, the space separators and U+200B), checked without its
        // CharacterSet, whose first use costs every command about 0.9 M instructions at start-up.
        if let home, home.unicodeScalars.allSatisfy({
            $0 == "\t" || $0 == "\u{200B}" || $0.properties.generalCategory == .spaceSeparator
        }) {
            throw ValidationError("--home needs a directory: leave it out to use $KEYMGR_HOME or the default")
        }
    }

    /// The store home these options name, in the request's environment.
    func storeHome(in context: CommandContext) -> StoreLocation {
        StoreLocation.resolve(explicit: home, environment: context.environment)
    }

    /// The console shaped by `--json`, `--quiet` and `--verbose`, on the request's streams.
    func console(in context: CommandContext) -> Console {
        Console(json: json, quiet: quiet, verbose: verbose, streams: context.streams,
                columns: context.environment["COLUMNS"])
    }

    /// Opens the existing store named by these options, for the request (`KeyManager.open` keeps its context: the
    /// facade decides with it); `readOnly` for a command that only reads (no write, no fsync).
    func openManager(in context: CommandContext, readOnly: Bool = false) throws -> KeyManager {
        let home = storeHome(in: context)
        console(in: context).detail("store \(home.url.path)")
        let logger = logger(in: context)
        if let prepared = AgentWarmWorker.openPrepared(home: home, context: context.request, environment: context.environment,
                                                      logger: logger) {
            return prepared
        }
        return try KeyManager.open(home: home, readOnly: readOnly, context: context.request,
                                   environment: context.environment, logger: logger)
    }

    /// The libraries' logs on the request's stderr: warnings, or everything with --verbose. Libraries log no secret.
    func logger(in context: CommandContext) -> Logger {
        let stream = context.streams.error
        var logger = Logger(label: "keymgr") { StreamLogHandler(label: $0, stream: stream) }
        logger.logLevel = verbose ? .debug : (quiet ? .error : .warning)
        return logger
    }
}

/// `--wide`: tables show whole kids, ids and timestamps instead of fitting the terminal (or 80 columns).
struct TableOptions: ParsableArguments {
    @Flag(help: "Show whole kids, ids and timestamps instead of fitting the terminal's width.")
    var wide = false
}

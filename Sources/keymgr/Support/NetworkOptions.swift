import ArgumentParser

/// `--timeout` of the commands that talk to the authorization server (as `login` and `sync` have it).
struct NetworkOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Seconds to wait for each server request (default: 15).", valueName: "s"))
    var timeout: Double = 15

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be more than 0 and at most 3600 seconds") }
    }
}

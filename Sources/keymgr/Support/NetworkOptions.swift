import ArgumentParser

/// `--profile`: which server profile a command talks to.
struct ProfileOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The server profile to use (see `keymgr server list`).", valueName: "name"))
    var profile: String = "default"
}

/// `--timeout` and `--profile` of the commands that talk to the server: `token`, `dcr`, `sync`, `admin`.
struct NetworkOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Seconds to wait for each server request.", valueName: "s"))
    var timeout: Double = 15

    @OptionGroup var server: ProfileOptions

    /// The server profile these options name.
    var profile: String { server.profile }

    func validate() throws {
        try DurationOption.check(timeout, "--timeout")
    }
}

/// `--concurrency` of the commands that reach the server for many users at once: `sync`, `admin devices`, `admin stale`.
struct FleetOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Users listed at once.", valueName: "n"))
    var concurrency: Int = 8

    func validate() throws {
        guard (1...64).contains(concurrency) else { throw ValidationError("--concurrency must be from 1 to 64") }
    }
}

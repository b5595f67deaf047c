use clap::Parser as _;

use super::*;

#[test]
fn spans_read_and_show_as_written() {
    for (text, shown) in [
        ("15s", "15s"),
        ("500ms", "500ms"),
        ("1.5s", "1500ms"),
        ("300", "300s"),
    ] {
        let span: Span = text.parse().expect(text);
        assert_eq!(span.to_string(), shown);
        assert_eq!(
            span.to_string().parse::<Span>(),
            Ok(span),
            "{text} round-trips"
        );
    }
    assert!("ten seconds".parse::<Span>().is_err());
}

/// What ratelimit mode makes of Envoy Gateway's environment is a command
/// line clap takes, with the settings it names.
#[test]
fn the_reference_environment_parses_as_serve_flags() {
    let env = crate::reference_env::tests::ENVOY_GATEWAY
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    let t = crate::reference_env::translate(env).expect("translates");
    let cli = Cli::try_parse_from(std::iter::once("sluice".to_owned()).chain(t.args))
        .expect("clap takes the translation");
    let Some(Command::Serve(args)) = cli.command else {
        panic!("a serve command");
    };
    assert_eq!(args.admin_addr.len(), 2);
    assert!(
        args.reference_metrics_addr
            .is_some_and(|a| a.port() == 19001)
    );
    assert_eq!(args.grpc_addr.port(), 8081);
    assert!(args.tls_files().is_some_and(|f| f.client_ca.is_some()));
    assert!(args.xds().is_some_and(|x| x.tls.is_some()));
}

/// Every subcommand's help reads as written: clap turns the characters of
/// a brace-n placeholder into a line break, so no help text may hold them.
#[test]
fn no_help_breaks_a_line_where_it_was_not_written() {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    for sub in cmd.get_subcommands() {
        for arg in sub.get_arguments() {
            let help = [arg.get_help(), arg.get_long_help()]
                .into_iter()
                .flatten()
                .map(ToString::to_string)
                .collect::<String>();
            assert!(
                !help.contains("{n}"),
                "sluice {} --{}: {help:?}",
                sub.get_name(),
                arg.get_id()
            );
        }
    }
}

/// `serve --help` groups every flag under a heading, the headings in the
/// order the book's flag table has them, "Start here" first: a new flag
/// must choose its group.
#[test]
fn every_serve_flag_is_under_a_heading_in_the_books_order() {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    let serve = cmd
        .get_subcommands()
        .find(|c| c.get_name() == "serve")
        .expect("serve");
    let mut order: Vec<&str> = Vec::new();
    for arg in serve.get_arguments().filter(|a| a.get_id() != "help") {
        let heading = arg
            .get_help_heading()
            .unwrap_or_else(|| panic!("--{} has no heading", arg.get_id()));
        if !order.contains(&heading) {
            order.push(heading);
        }
    }
    let book = [
        heading::START,
        heading::RULES,
        heading::XDS,
        heading::STORE,
        heading::FAILURE,
        heading::DECISIONS,
        heading::QUOTA,
        heading::LISTENERS,
        heading::TLS,
        heading::BOUNDS,
        heading::CONNECTIONS,
        heading::OBSERVABILITY,
        heading::PRIVACY,
    ];
    assert_eq!(order, book);
    let start = serve
        .get_arguments()
        .filter(|a| a.get_help_heading() == Some(heading::START))
        .count();
    assert!((3..=8).contains(&start), "{start} flags to start with");
}

/*
 * `selene pool`: the pool manager (pool/manager.h) as a foreground daemon.
 * It logs to stderr, serves until SIGTERM or SIGINT, then drains (live
 * claims and puts finish until their deadlines, R-POOL-45) and exits 0.
 * Metrics over HTTP as `selene run --metrics-port` serves them. This file
 * only reads the command line and wires signals; the manager is library
 * code.
 */
#include "cluster/join.h"
#include "common/base.h"
#include "common/log.h"
#include "launch/args.h"
#include "launch/commands.h"
#include "launch/metrics/http.h"
#include "pool/manager.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct pool_manager *signal_manager;

static void on_signal(int sig)
{
	(void)sig;
	if (signal_manager)
		pool_manager_stop(signal_manager); /* a write(2) to an eventfd */
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: selene pool --secret FILE --memory SIZE [options]\n"
		"\n"
		"Runs a pool manager in the foreground: Selene instances attach to it\n"
		"(selene run --pool ADDR) and share prefix-cache records through it\n"
		"(pool/PROTOCOL.md). Logs go to stderr; SIGTERM or SIGINT drains and exits.\n"
		"\n"
		"  --listen ADDR:PORT   where to listen (default :7400, every address;\n"
		"                       [v6]:port for IPv6)\n"
		"  --name NAME          the pool's name; it salts every scope, so a\n"
		"                       renamed pool starts cold (default \"selene\")\n"
		"  --secret FILE        the pool secret: exactly 32 bytes, mode 0600;\n"
		"                       every connection proves it (required)\n"
		"  --memory SIZE        the shared-memory arena in /dev/shm (K, M, G, T;\n"
		"                       at least 1M; required)\n"
		"  --max-age-ms N       drop records put more than N ms ago (default 0:\n"
		"                       never): at most 64 a sweep, one sweep a minute\n"
		"                       or every N ms if shorter\n"
		"  --window SIZE        the largest window sent (64K .. 16M, default 4M)\n"
		"  --metrics-port N     serve Prometheus metrics on 127.0.0.1:N\n"
		"  --rdma               claims by RDMA WRITEs into slots the instances\n"
		"                       lend, where a verbs device is on both ends; without\n"
		"                       one, one warning and claims use TCP\n"
		"  --rdma-device NAME   the verbs device (default: the first with an active\n"
		"                       port); implies --rdma\n"
		"  --dir DIR            a disk tier below the arena: evicted records move\n"
		"                       there as record files and are found again when\n"
		"                       a pool of the same name starts on it\n"
		"  --disk-limit SIZE    the most the --dir tier's files may take (K, M, G,\n"
		"                       T; at least 1M); past it the least recently used\n"
		"                       records there are deleted (default: no limit)\n"
		"  -h, --help           this text\n");
}

/* Appends one family (HELP, TYPE, samples) to buf at *used. */
static int family(char *buf, size_t size, size_t *used, const char *name, const char *type,
		  const char *help, const char *samples)
{
	int n = snprintf(buf + *used, size - *used, "# HELP %s %s\n# TYPE %s %s\n%s", name, help,
			 name, type, samples);

	if (n < 0 || (size_t)n >= size - *used)
		return -ENOSPC;
	*used += (size_t)n;
	return 0;
}

static int render_metrics(void *ctx, char *buf, size_t size)
{
	struct pool_manager_stats s;
	char v[512];
	size_t used = 0;
	int ret = 0;

	pool_manager_stats(ctx, &s);
#define ONE(name, type, help, fmt, ...)                                              \
	do {                                                                         \
		snprintf(v, sizeof(v), fmt, __VA_ARGS__);                            \
		if (!ret)                                                            \
			ret = family(buf, size, &used, name, type, help, v);         \
	} while (0)
	ONE("selene_pool_records", "gauge", "Records the pool holds, every scope and tier.",
	    "selene_pool_records %" PRIu64 "\n", s.records);
	ONE("selene_pool_arena_used_bytes", "gauge", "Bytes of the arena that records use.",
	    "selene_pool_arena_used_bytes %" PRIu64 "\n", s.arena_used_bytes);
	ONE("selene_pool_connections_total", "counter", "Connections accepted.",
	    "selene_pool_connections_total %" PRIu64 "\n", s.connections);
	ONE("selene_pool_refused_total", "counter", "Connections refused, for any reason.",
	    "selene_pool_refused_total %" PRIu64 "\n", s.refused);
	ONE("selene_pool_auth_failures_total", "counter",
	    "Proofs or frame tags that did not verify.",
	    "selene_pool_auth_failures_total %" PRIu64 "\n", s.auth_failures);
	ONE("selene_pool_puts_total", "counter", "Puts ended, by outcome.",
	    "selene_pool_puts_total{outcome=\"committed\"} %" PRIu64 "\n"
	    "selene_pool_puts_total{outcome=\"failed\"} %" PRIu64 "\n",
	    s.puts_committed, s.puts_failed);
	ONE("selene_pool_claims_total", "counter", "Claims answered, by outcome.",
	    "selene_pool_claims_total{outcome=\"granted\"} %" PRIu64 "\n"
	    "selene_pool_claims_total{outcome=\"refused\"} %" PRIu64 "\n",
	    s.claims_granted, s.claims_refused);
	ONE("selene_pool_lookups_total", "counter", "Lookups answered.",
	    "selene_pool_lookups_total %" PRIu64 "\n", s.lookups);
	ONE("selene_pool_lookup_hits_total", "counter", "Lookups that matched a chain.",
	    "selene_pool_lookup_hits_total %" PRIu64 "\n", s.lookup_hits);
	ONE("selene_pool_disk_used_bytes", "gauge", "Bytes of the disk tier's record files.",
	    "selene_pool_disk_used_bytes %" PRIu64 "\n", s.disk_used_bytes);
	ONE("selene_pool_disk_queue_jobs", "gauge",
	    "Jobs the disk tier's thread holds: spills, loads and deletions.",
	    "selene_pool_disk_queue_jobs %" PRIu64 "\n", s.disk_queued);
	ONE("selene_pool_disk_queue_full_total", "counter",
	    "Spills refused because the disk thread's queue was full (backpressure).",
	    "selene_pool_disk_queue_full_total %" PRIu64 "\n", s.disk_queue_full);
	ONE("selene_pool_spill_failures_total", "counter",
	    "Spills whose share files could not be written (the record is dropped).",
	    "selene_pool_spill_failures_total %" PRIu64 "\n", s.spill_failures);
	ONE("selene_pool_records_dropped_total", "counter", "Records dropped, by reason.",
	    "selene_pool_records_dropped_total{reason=\"evicted\"} %" PRIu64 "\n"
	    "selene_pool_records_dropped_total{reason=\"expired\"} %" PRIu64 "\n"
	    "selene_pool_records_dropped_total{reason=\"disk_failure\"} %" PRIu64 "\n"
	    "selene_pool_records_dropped_total{reason=\"disk_limit\"} %" PRIu64 "\n",
	    s.evicted, s.expired, s.disk_failures, s.disk_evicted);
	ONE("selene_pool_disk_moves_total", "counter",
	    "Records moved between the arena and the disk tier, by direction.",
	    "selene_pool_disk_moves_total{direction=\"spilled\"} %" PRIu64 "\n"
	    "selene_pool_disk_moves_total{direction=\"loaded\"} %" PRIu64 "\n",
	    s.spilled, s.loaded);
	ONE("selene_pool_holds", "gauge",
	    "Records instances announced they hold in their own tiers, every scope.",
	    "selene_pool_holds %" PRIu64 "\n", s.holds);
	ONE("selene_pool_holds_dropped_total", "counter",
	    "Announcements dropped past a scope's bound.",
	    "selene_pool_holds_dropped_total %" PRIu64 "\n", s.holds_dropped);
	ONE("selene_pool_exports_total", "counter", "Exports asked of holders, by outcome.",
	    "selene_pool_exports_total{outcome=\"requested\"} %" PRIu64 "\n"
	    "selene_pool_exports_total{outcome=\"completed\"} %" PRIu64 "\n"
	    "selene_pool_exports_total{outcome=\"refused\"} %" PRIu64 "\n"
	    "selene_pool_exports_total{outcome=\"failed\"} %" PRIu64 "\n",
	    s.exports_requested, s.exports_completed, s.exports_refused, s.exports_failed);
	ONE("selene_pool_rdma_connections_total", "counter",
	    "Rank connections whose lent slots the manager connected to (--rdma).",
	    "selene_pool_rdma_connections_total %" PRIu64 "\n", s.rdma_connections);
	ONE("selene_pool_rdma_windows_total", "counter", "Claim windows written by RDMA.",
	    "selene_pool_rdma_windows_total %" PRIu64 "\n", s.rdma_windows);
	ONE("selene_pool_rdma_failures_total", "counter",
	    "RDMA transfers or connects that failed (the first turns RDMA off).",
	    "selene_pool_rdma_failures_total %" PRIu64 "\n", s.rdma_failures);
#undef ONE
	return ret ? ret : (int)used;
}

int launch_cmd_pool(int argc, char **argv)
{
	static const struct option options[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "name", required_argument, NULL, 'n' },
		{ "secret", required_argument, NULL, 's' },
		{ "memory", required_argument, NULL, 'm' },
		{ "max-age-ms", required_argument, NULL, 'a' },
		{ "window", required_argument, NULL, 'w' },
		{ "metrics-port", required_argument, NULL, 'p' },
		{ "rdma", no_argument, NULL, 'r' },
		{ "rdma-device", required_argument, NULL, 'R' },
		{ "dir", required_argument, NULL, 'd' },
		{ "disk-limit", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct pool_manager_config config = { .listen = ":7400", .name = "selene" };
	struct launch_metrics_http *metrics = NULL;
	struct pool_manager *m = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	const char *secret_path = NULL;
	uint32_t metrics_port = 0, window = 0;
	bool has_metrics = false;
	char why[512];
	int opt, ret;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case 'l':
			config.listen = optarg;
			break;
		case 'n':
			config.name = optarg;
			break;
		case 's':
			secret_path = optarg;
			break;
		case 'm':
			if (!launch_option_u64("pool", "memory", optarg, LAUNCH_SIZE, 1u << 20,
					       UINT64_MAX / 2, &config.memory_bytes))
				return LAUNCH_EXIT_USAGE;
			break;
		case 'a':
			if (!launch_option_u64("pool", "max-age-ms", optarg, LAUNCH_COUNT, 0,
					       UINT64_MAX / 1000000, &config.max_age_ms))
				return LAUNCH_EXIT_USAGE;
			break;
		case 'w':
			if (!launch_option_u32("pool", "window", optarg, LAUNCH_SIZE,
					       POOL_WINDOW_BYTES_MIN, POOL_WINDOW_BYTES_MAX, &window))
				return LAUNCH_EXIT_USAGE;
			break;
		case 'p':
			if (!launch_option_u32("pool", "metrics-port", optarg, LAUNCH_COUNT, 0, 65535,
					       &metrics_port))
				return LAUNCH_EXIT_USAGE;
			has_metrics = true;
			break;
		case 'r':
			config.rdma = true;
			break;
		case 'R':
			config.rdma = true;
			config.rdma_device = optarg;
			break;
		case 'd':
			config.dir = optarg;
			break;
		case 'D':
			if (!launch_option_u64("pool", "disk-limit", optarg, LAUNCH_SIZE, 1u << 20,
					       UINT64_MAX / 2, &config.disk_limit_bytes))
				return LAUNCH_EXIT_USAGE;
			break;
		case 'h':
			usage(stdout);
			return LAUNCH_EXIT_OK;
		default:
			usage(stderr);
			return LAUNCH_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "selene pool: unexpected operand %s\n", argv[optind]);
		return LAUNCH_EXIT_USAGE;
	}
	if (!secret_path || !config.memory_bytes) {
		fprintf(stderr, "selene pool: --secret and --memory are required (see --help)\n");
		return LAUNCH_EXIT_USAGE;
	}
	if (config.disk_limit_bytes && !config.dir) {
		fprintf(stderr,
			"selene pool: --disk-limit limits the --dir tier: give --dir too\n");
		return LAUNCH_EXIT_USAGE;
	}
	if (cluster_secret_load(secret_path, "--secret", config.secret, why, sizeof(why))) {
		fprintf(stderr, "selene pool: %s\n", why);
		return LAUNCH_EXIT_USAGE;
	}
	config.window_bytes = window;
	ret = pool_manager_open(&config, &m, why, sizeof(why));
	explicit_bzero(config.secret, sizeof(config.secret));
	if (ret) {
		fprintf(stderr, "selene pool: %s\n", why);
		return LAUNCH_EXIT_BAD;
	}
	if (has_metrics) {
		uint16_t bound = 0;

		ret = launch_metrics_http_start(NULL, (uint16_t)metrics_port, render_metrics, m,
						&metrics, &bound, why, sizeof(why));
		if (ret) {
			fprintf(stderr, "selene pool: --metrics-port %u: %s\n", metrics_port, why);
			pool_manager_close(m);
			return LAUNCH_EXIT_BAD;
		}
		sel_info("pool: metrics on http://127.0.0.1:%u/metrics", bound);
	}
	signal_manager = m;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sel_info("pool: \"%s\" listening on port %u, arena %s (%" PRIu64 " bytes)",
		 config.name, pool_manager_port(m), pool_manager_arena_path(m),
		 config.memory_bytes);
	ret = pool_manager_run(m);
	signal_manager = NULL;
	launch_metrics_http_stop(metrics);
	pool_manager_close(m);
	if (ret) {
		fprintf(stderr, "selene pool: %s\n", sel_strerror(ret));
		return LAUNCH_EXIT_BAD;
	}
	sel_info("pool: stopped");
	return LAUNCH_EXIT_OK;
}

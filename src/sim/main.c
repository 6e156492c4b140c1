/* main.c: gpuq-sim — runs a workload through the gpuq scheduler core and the
 * baselines with simulated time and prints their figures side by side.
 *   gpuq-sim --workload FILE --policy NAME[,NAME...]|all [--seed N] [--json] [--no-timing] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/report.h"
#include "sim/sim.h"

static const struct policy *const all_policies[] = {
    &policy_gpuq,        &policy_rr,          &policy_least_loaded, &policy_affinity,
    &policy_affinity_ect, &policy_pick_worker, &policy_shared_fifo, &policy_oracle,
    &policy_oracle_prio,
};
#define NPOL ((int)(sizeof(all_policies) / sizeof(all_policies[0])))

static void usage(FILE *f)
{
    fprintf(f, "usage: gpuq-sim --workload FILE --policy NAME [--seed N] [--json] [--no-timing]\n"
               "  NAME: gpuq, rr, least-loaded, affinity, affinity-ect, pick-worker,\n"
               "        shared-fifo, oracle, oracle-prio, a comma-separated list of\n"
               "        them, or all\n"
               "  --json       one JSON object keyed by policy name\n"
               "  --no-timing  leave out decision_us (wall-clock), for byte-identical reports\n");
}

int fleet_scale_main(int argc, char **argv); /* fleet_scale.c: gpuq-sim scale */

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "scale") == 0)
        return fleet_scale_main(argc - 1, argv + 1);
    const char *wpath = NULL, *pname = NULL;
    bool json = false, timing = true, have_seed = false;
    unsigned long long seed = 0;
    static const struct option opts[] = {
        {"workload", required_argument, NULL, 'w'}, {"policy", required_argument, NULL, 'p'},
        {"seed", required_argument, NULL, 's'},     {"json", no_argument, NULL, 'j'},
        {"no-timing", no_argument, NULL, 'T'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "w:p:s:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            wpath = optarg;
            break;
        case 'p':
            pname = optarg;
            break;
        case 's': {
            char *end;
            seed = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0') {
                fprintf(stderr, "gpuq-sim: --seed: not a non-negative integer: %s\n", optarg);
                return 2;
            }
            have_seed = true;
            break;
        }
        case 'j':
            json = true;
            break;
        case 'T':
            timing = false;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!wpath || !pname || optind != argc) {
        usage(stderr);
        return 2;
    }
    const struct policy *run[NPOL];
    int nrun = 0;
    /* NAME, a comma-separated list of names (run in that order), or all. */
    if (strcmp(pname, "all") == 0) {
        for (int i = 0; i < NPOL; i++)
            run[nrun++] = all_policies[i];
    } else {
        const char *p = pname;
        while (*p) {
            size_t len = strcspn(p, ",");
            const struct policy *found = NULL;
            for (int i = 0; i < NPOL; i++)
                if (strlen(all_policies[i]->name) == len &&
                    strncmp(p, all_policies[i]->name, len) == 0)
                    found = all_policies[i];
            bool dup = false;
            for (int k = 0; k < nrun; k++)
                dup = dup || run[k] == found;
            if (!found || dup) {
                fprintf(stderr, "gpuq-sim: --policy: %s policy \"%.*s\"\n",
                        found ? "repeated" : "unknown", (int)len, p);
                usage(stderr);
                return 2;
            }
            run[nrun++] = found;
            p += len;
            if (*p == ',')
                p++;
        }
    }
    if (nrun == 0) {
        fprintf(stderr, "gpuq-sim: --policy: no policy named\n");
        usage(stderr);
        return 2;
    }
    char err[512];
    struct workload *wl = workload_load(wpath, err, sizeof(err));
    if (!wl) {
        fprintf(stderr, "gpuq-sim: %s\n", err);
        return 1;
    }
    if (!have_seed)
        seed = wl->seed;
    int njobs = 0;
    struct sim_job *jobs = sim_make_jobs(wl, seed, &njobs);
    struct report *reps = calloc((size_t)nrun, sizeof(*reps));
    for (int i = 0; i < nrun; i++) {
        struct sim s;
        sim_run(&s, wl, run[i], jobs, njobs, seed);
        report_make(&s, &reps[i]);
        sim_fini(&s);
    }
    /* Every figure beside the oracle's (the floor), when it ran. */
    for (int i = 0; i < nrun; i++)
        if (run[i] == &policy_oracle)
            for (int k = 0; k < nrun; k++)
                report_vs_oracle(&reps[k], &reps[i]);
    if (json) {
        json_t *o = json_object();
        for (int i = 0; i < nrun; i++)
            json_object_set_new(o, reps[i].policy, report_json(&reps[i], timing));
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("%s\n", text);
        free(text);
        json_decref(o);
    } else {
        printf("workload %s: %d jobs, %d GPUs, seed %llu\n", wl->name, njobs, wl->ngpus, seed);
        report_table(stdout, reps, nrun);
    }
    for (int i = 0; i < nrun; i++)
        report_fini(&reps[i]);
    free(reps);
    free(jobs);
    workload_destroy(wl);
    return 0;
}

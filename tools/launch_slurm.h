/* launch_slurm.h: `fusionc launch OUT --slurm` and `fusionc stop` of such a
 * run (tools/launch_slurm.c): OUT's devices as one Slurm job, one task a
 * device, on a folder the nodes share. */
#ifndef FUSION_LAUNCH_SLURM_H
#define FUSION_LAUNCH_SLURM_H

#define SLURM_MAX_SBATCH 32

/* --sbatch OPTION, repeatable: passed to sbatch as they are, after (so
 * over) the job script's own #SBATCH lines. */
typedef struct {
    const char *items[SLURM_MAX_SBATCH];
    int n;
} sbatch_options;

/* Writes OUT/slurm/job.sh, submits it with sbatch, and (unless detach)
 * follows the job to its end: the reporter's progress printed, each device
 * that failed named with its node and its log's reason.  args: the device
 * programs' arguments, as launch-local.sh takes them (paths as seen from
 * this folder, which the job runs in).  0 when every device completed,
 * 1 otherwise (said on stderr). */
int slurm_launch(const char *out_dir, const sbatch_options *sbatch, int detach, char *const *args, int n_args);

/* `fusionc stop OUT` for a run launched with --slurm: cancels OUT's job
 * (scancel: the devices finish their step, saved with --save) and waits for
 * it to end.  0 stopped or already ended, 1 when it could not be;
 * -1 when OUT has no Slurm job (stop it over ssh). */
int slurm_stop(const char *out_dir);

#endif

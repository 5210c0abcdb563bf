# Test objective: starts a process tree, each process writing its pid to
# <MARKS>/<trial>.<attempt>.pid.<name>, then writes <trial>.<attempt>.start
# and sleeps (the issue 13 case: sh -c 'sleep 6; echo end'):
#   bg      a background child
#   grand   a grandchild, under a child that waits for it
#   setsid  a child in a session of its own (out of the process group)
#   orphan  a grandchild whose setsid parent exits (reparented)
#   noterm  a child that ignores SIGTERM
p=$MARKS/$SOMA_TRIAL.$SOMA_ATTEMPT
sh -c 'echo $$ > '$p'.tmp.bg; mv '$p'.tmp.bg '$p'.pid.bg; exec sleep 300' &
sh -c 'sh -c "echo \$\$ > '$p'.tmp.grand; mv '$p'.tmp.grand '$p'.pid.grand; exec sleep 300" & wait' &
setsid sh -c 'echo $$ > '$p'.tmp.setsid; mv '$p'.tmp.setsid '$p'.pid.setsid; exec sleep 300' &
setsid sh -c 'sh -c "echo \$\$ > '$p'.tmp.orphan; mv '$p'.tmp.orphan '$p'.pid.orphan; exec sleep 300" &' &
sh -c 'trap "" TERM; echo $$ > '$p'.tmp.noterm; mv '$p'.tmp.noterm '$p'.pid.noterm; exec sleep 300' &
for f in bg grand setsid orphan noterm; do while [ ! -e $p.pid.$f ]; do sleep 0.01; done; done
echo $$ > $p.pid.objective
echo $$ > $p.start
sleep 300
echo end
